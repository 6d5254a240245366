package mapjson

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"

	"github.com/gpubpf/gpubpf/pkg/runtime/gpumap"
)

var (
	u32   = &btf.Int{Name: "u32", Size: 4}
	s16   = &btf.Int{Name: "s16", Size: 2, Encoding: btf.Signed}
	f32   = &btf.Float{Name: "float", Size: 4}
	vec   = Map{Name: "vec_A", Kind: gpumap.Array, KeySize: 4, ValueSize: 4, MaxEntries: 8, Value: scalarOf(u32, 4)}
	dims  = Map{Name: "gemm_dims", Kind: gpumap.Array, KeySize: 4, ValueSize: 12, MaxEntries: 1, Value: scalarOf(&btf.Array{Type: u32, Nelems: 3}, 12)}
	small = Map{Name: "small", Kind: gpumap.Array, KeySize: 4, ValueSize: 2, MaxEntries: 4, Value: scalarOf(s16, 2)}
	flt   = Map{Name: "flt", Kind: gpumap.Array, KeySize: 4, ValueSize: 4, MaxEntries: 4, Value: scalarOf(f32, 4)}
	raw   = Map{Name: "raw", Kind: gpumap.Array, KeySize: 4, ValueSize: 8, MaxEntries: 4}
	odd   = Map{Name: "odd", Kind: gpumap.Array, KeySize: 4, ValueSize: 3, MaxEntries: 2}
	hash  = Map{Name: "h", Kind: gpumap.Hash, KeySize: 8, ValueSize: 8, MaxEntries: 4}
	per   = Map{Name: "per", Kind: gpumap.PerThreadArray, KeySize: 4, ValueSize: 8, MaxEntries: 1}
)

func le32(vs ...uint32) string {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint32(b, v)
	}
	return hex.EncodeToString(b)
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		m          Map
		json       string
		keys, vals string // hex
		fails      string
	}{
		// arrays: per-key values
		{m: vec, json: `[1, 2, 4294967295]`, keys: le32(0, 1, 2), vals: le32(1, 2, 0xffffffff)},
		{m: vec, json: `[-1]`, keys: le32(0), vals: le32(0xffffffff)},
		{m: vec, json: `[]`},
		{m: vec, json: `[1,2,3,4,5,6,7,8,9]`, fails: "map vec_A has 8 entries, and the array gives 9 values: give at most 8"},
		{m: vec, json: `[4294967296]`, fails: "map vec_A key 0: value 4294967296 is out of range for 4-byte values: give one from -2147483648 to 4294967295"},
		{m: vec, json: `[-2147483649]`, fails: "out of range for 4-byte values"},
		{m: vec, json: `[1.5]`, fails: "key 0: value 1.5 is not an integer"},
		{m: vec, json: `[true]`, fails: "value is a boolean: give a number"},
		// sparse
		{m: vec, json: `{"3": 7, "0x1": 9}`, keys: le32(1, 3), vals: le32(9, 7)},
		{m: vec, json: `{"8": 1}`, fails: `map vec_A key "8": the map has 8 entries (keys 0 to 7): use a key below 8`},
		{m: vec, json: `{"x": 1}`, fails: "an array's keys are indexes 0 to 7"},
		{m: vec, json: `{"07": 1}`, keys: le32(7), vals: le32(1)}, // decimal, not octal
		// start/step
		{m: vec, json: `{"start": 5, "step": 3}`, keys: le32(0, 1, 2, 3, 4, 5, 6, 7), vals: le32(5, 8, 11, 14, 17, 20, 23, 26)},
		{m: vec, json: `{"start": 1, "count": 2}`, keys: le32(0, 1), vals: le32(1, 1)},
		{m: vec, json: `{"start": 10, "step": -1, "count": 3}`, keys: le32(0, 1, 2), vals: le32(10, 9, 8)},
		{m: vec, json: `{"start": 0, "step": 1000000000}`, fails: "key 7 (start + step*7): value 7000000000 is out of range"},
		{m: vec, json: `{"start": 0, "count": 9}`, fails: `"count" is how many keys to fill, 0 to 8`},
		{m: vec, json: `{"start": 0, "stride": 1}`, fails: `"stride" is none of those`},
		{m: vec, json: `{"start": "0"}`, fails: `"start" is the string "0", not a number`},
		{m: dims, json: `{"start": 0}`, fails: "a start/step sequence fills values that are one number"},
		{m: flt, json: `{"start": 0.5, "step": 0.25, "count": 2}`, keys: le32(0, 1), vals: le32(0x3f000000, 0x3f400000)},
		// array of numbers split over the value
		{m: dims, json: `[[64, 32, 16]]`, keys: le32(0), vals: le32(64, 32, 16)},
		{m: dims, json: `[[1, 2]]`, fails: "2 numbers do not split a 12-byte value"},
		{m: dims, json: `[[1, 2, 3, 4, 5, 6]]`, keys: le32(0), vals: "010002000300040005000600"},
		{m: dims, json: `[[1, "2", 3]]`, fails: "element 1 of the value is the string"},
		{m: dims, json: `[[1, 2, 4294967296]]`, fails: "element 2: value 4294967296 is out of range"},
		// hex
		{m: dims, json: `["0x000102030405060708090a0b"]`, keys: le32(0), vals: "000102030405060708090a0b"},
		{m: dims, json: `["0x0001"]`, fails: `value "0x0001" has 2 bytes; the map's values have 12 (24 hex digits)`},
		{m: dims, json: `["0xzz"]`, fails: "is not hex"},
		{m: dims, json: `["12"]`, fails: `a string value is "0x" and exactly 12 bytes in hex`},
		// signed, float, sizes without BTF
		{m: small, json: `[-32768, 65535]`, keys: le32(0, 1), vals: "0080ffff"},
		{m: small, json: `[65536]`, fails: "out of range for 2-byte values: give one from -32768 to 65535"},
		{m: flt, json: `[1.5, -2]`, keys: le32(0, 1), vals: le32(0x3fc00000, 0xc0000000)},
		{m: flt, json: `[1e39]`, fails: "out of range for a 4-byte float"},
		{m: raw, json: `[18446744073709551615, -9223372036854775808]`, keys: le32(0, 1), vals: "ffffffffffffffff0000000000000080"},
		{m: odd, json: `[16777216]`, fails: "out of range for 3-byte values: give one from -8388608 to 16777215"},
		{m: odd, json: `[-1]`, keys: le32(0), vals: "ffffff"},
		{m: odd, json: `["0x010203"]`, keys: le32(0), vals: "010203"},
		// hash maps
		{m: hash, json: `{"-1": 5, "7": "0x0100000000000000"}`, keys: "ffffffffffffffff0700000000000000", vals: "05000000000000000100000000000000"},
		{m: hash, json: `{"0x0100000000000000": 5}`, keys: "0100000000000000", vals: "0500000000000000"},
		{m: hash, json: `[1, 2]`, fails: `map h is a hash map: give its entries as an object {"KEY": value, ...}`},
		{m: hash, json: `{"a": 1}`, fails: `key "a": a key is a decimal integer or "0x" and its 8 bytes in hex`},
		{m: hash, json: `{"1":1,"2":2,"3":3,"4":4,"5":5}`, fails: "map h has 4 entries, and the object gives 5"},
		{m: hash, json: `{"start": 1}`, fails: `key "start": a key is a decimal integer`},
		// forms and JSON
		{m: vec, json: `7`, fails: `want an array [v0, v1, ...], an object {"KEY": value} or {"start": A, "step": B}; got the number 7`},
		{m: hash, json: `"x"`, fails: `want an object {"KEY": value, ...}; got the string "x"`},
		{m: per, json: `[1]`, fails: "map per is a GPU per-thread-array: --map fills arrays and hash maps only"},
		{m: vec, json: "[1,\n 2,", fails: "src: bad JSON"},
		{m: vec, json: "[1,\n x]", fails: "src: bad JSON at line 2, column 2"},
		{m: vec, json: "[1] [2]", fails: "more after the JSON value"},
	} {
		t.Run(tc.m.Name+" "+tc.json, func(t *testing.T) {
			f, err := Parse(tc.m, []byte(tc.json), "src")
			if tc.fails != "" {
				if err == nil || !strings.Contains(err.Error(), tc.fails) {
					t.Fatalf("error %v, want one saying %q", err, tc.fails)
				}
				if !strings.HasPrefix(err.Error(), "src: ") {
					t.Errorf("error %q does not name its source", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if k, v := hex.EncodeToString(f.Keys), hex.EncodeToString(f.Values); k != tc.keys || v != tc.vals {
				t.Errorf("keys %s values %s, want %s %s", k, v, tc.keys, tc.vals)
			}
		})
	}
}

func TestParseFile(t *testing.T) {
	maps := map[string]Map{"vec_A": vec, "gemm_dims": dims, "per": per}
	got, err := ParseFile(maps, []byte(`{"vec_A": [1, 2], "gemm_dims": [[1, 2, 3]]}`), "ab.json")
	if err != nil || len(got) != 2 || got["vec_A"].Len(4) != 2 || got["gemm_dims"].Len(12) != 1 {
		t.Fatalf("%+v %v", got, err)
	}
	for js, want := range map[string]string{
		`{"vec_B": [1]}`:      "ab.json: no map vec_B among the maps the programs use; the ones to fill are gemm_dims, vec_A",
		`[1, 2]`:              `ab.json: want a JSON object of map names and their values, like {"vec_A": [1, 2, 3]}; got an array`,
		`{"vec_A": [1, "x"]}`: `ab.json: map vec_A key 1: value "x": a string value is "0x"`,
		`{"vec_A": [1`:        "ab.json: bad JSON",
	} {
		if _, err := ParseFile(maps, []byte(js), "ab.json"); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want %q", js, err, want)
		}
	}
}

// What a dump writes reads back as the same bytes.
func TestDumpRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		m    Map
		vals []string // hex values
		want string   // JSON of the first
	}{
		{vec, []string{le32(3), le32(0xffffffff)}, "3"},
		{dims, []string{le32(64, 32, 16)}, "[64,32,16]"},
		{small, []string{"0080", "ffff"}, "-32768"},
		{flt, []string{le32(0x3fc00000), le32(0x7f800000)}, "1.5"},
		{raw, []string{"ffffffffffffffff"}, "18446744073709551615"},
		{odd, []string{"010203"}, `"0x010203"`},
	} {
		for i, hv := range tc.vals {
			v, _ := hex.DecodeString(hv)
			js := tc.m.AppendValue(nil, v)
			if i == 0 && string(js) != tc.want {
				t.Errorf("%s: %s dumps as %s, want %s", tc.m.Name, hv, js, tc.want)
			}
			f, err := Parse(tc.m, []byte("["+string(js)+"]"), "dump")
			if err != nil || !bytes.Equal(f.Values, v) {
				t.Errorf("%s: %s -> %s -> %x %v", tc.m.Name, hv, js, f.Values, err)
			}
		}
	}
	for _, k := range []string{"ffffffffffffffff", "0700000000000000"} {
		kb, _ := hex.DecodeString(k)
		js := hash.AppendKey(nil, kb)
		f, err := Parse(hash, []byte("{"+string(js)+": 1}"), "dump")
		if err != nil || !bytes.Equal(f.Keys, kb) {
			t.Errorf("hash key %s -> %s -> %x %v", k, js, f.Keys, err)
		}
	}
}

func TestFromSpec(t *testing.T) {
	m, err := FromSpec("gemm_dims", &ebpf.MapSpec{Type: 1503, KeySize: 4, ValueSize: 12, MaxEntries: 1, Value: &btf.Array{Type: u32, Nelems: 3}})
	if err != nil || m.Kind != gpumap.Array || m.Value != (Scalar{Size: 4, Count: 3}) {
		t.Fatalf("%+v %v", m, err)
	}
	if _, err := FromSpec("lru", &ebpf.MapSpec{Name: "lru", Type: ebpf.LRUHash}); err == nil {
		t.Fatal("an LRU hash was described")
	}
	if s := scalarOf(&btf.Struct{Size: 8}, 8); s != (Scalar{}) {
		t.Errorf("a struct reads as numbers: %+v", s)
	}
}

// FuzzParseValue: any JSON value for any value size parses or is refused
// with an error, never a panic; what parses has exactly the value's size
// and reads back as the same bytes from its dump.
func FuzzParseValue(f *testing.F) {
	for _, s := range []string{"0", "-1", "4294967295", "[1,2,3]", `"0x0102"`, "1.5", "[]", "1e400", "-0", "[-1,-2]", "18446744073709551616"} {
		f.Add(s, uint8(4), uint8(0))
		f.Add(s, uint8(12), uint8(1))
		f.Add(s, uint8(2), uint8(2))
	}
	f.Fuzz(func(t *testing.T, js string, size, typ uint8) {
		if size == 0 || size > 64 {
			return
		}
		m := Map{Name: "m", Kind: gpumap.Array, KeySize: 4, ValueSize: uint32(size), MaxEntries: 1}
		switch typ % 4 {
		case 1:
			m.Value = scalarOf(&btf.Array{Type: u32, Nelems: uint32(size) / 4}, int(size))
		case 2:
			m.Value = scalarOf(&btf.Int{Size: uint32(size), Encoding: btf.Signed}, int(size))
		case 3:
			m.Value = scalarOf(&btf.Float{Size: uint32(size)}, int(size))
		}
		fill, err := Parse(m, []byte("["+js+"]"), "fuzz")
		if err != nil {
			return
		}
		if len(fill.Values) != fill.Len(m.ValueSize)*int(size) || len(fill.Keys) != 4*fill.Len(m.ValueSize) {
			t.Fatalf("%s: %d value bytes, %d key bytes", js, len(fill.Values), len(fill.Keys))
		}
		for i := 0; i < fill.Len(m.ValueSize); i++ {
			v := fill.Values[i*int(size) : (i+1)*int(size)]
			back, err := Parse(m, []byte("["+string(m.AppendValue(nil, v))+"]"), "dump")
			if err != nil || !bytes.Equal(back.Values, v) {
				t.Fatalf("%s -> %x -> %s -> %x %v", js, v, m.AppendValue(nil, v), back.Values, err)
			}
		}
	})
}

func Example() {
	f, _ := Parse(vec, []byte(`{"start": 0, "step": 2, "count": 3}`), "--map vec_A")
	fmt.Printf("%x\n", f.Values)
	// Output: 000000000200000004000000
}
