package btffmt

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"

	"github.com/cilium/ebpf/btf"
)

var (
	tU8   = &btf.Int{Name: "unsigned char", Size: 1}
	tU16  = &btf.Int{Name: "unsigned short", Size: 2}
	tU32  = &btf.Int{Name: "unsigned int", Size: 4}
	tU64  = &btf.Int{Name: "unsigned long long", Size: 8}
	tS8   = &btf.Int{Name: "signed char", Size: 1, Encoding: btf.Signed}
	tS16  = &btf.Int{Name: "short", Size: 2, Encoding: btf.Signed}
	tS32  = &btf.Int{Name: "int", Size: 4, Encoding: btf.Signed}
	tS64  = &btf.Int{Name: "long long", Size: 8, Encoding: btf.Signed}
	tBool = &btf.Int{Name: "_Bool", Size: 1, Encoding: btf.Bool}
	tChar = &btf.Int{Name: "char", Size: 1, Encoding: btf.Char}
	// clang emits plain char as a signed 1-byte int named "char".
	tCharName = &btf.Int{Name: "char", Size: 1, Encoding: btf.Signed}
)

// traceEvent is the 40-byte record of the benchmark.
var traceEvent = &btf.Struct{Name: "trace_event", Size: 40, Members: []btf.Member{
	{Name: "ts", Type: tU64, Offset: 0},
	{Name: "block_x", Type: tU32, Offset: 64},
	{Name: "block_y", Type: tU32, Offset: 96},
	{Name: "block_z", Type: tU32, Offset: 128},
	{Name: "thread_x", Type: tU32, Offset: 160},
	{Name: "thread_y", Type: tU32, Offset: 192},
	{Name: "thread_z", Type: tU32, Offset: 224},
	{Name: "pad", Type: tU32, Offset: 256},
}}

type namedType struct {
	name string
	typ  btf.Type
}

// testTypes covers every kind Format renders, well-formed and not.
func testTypes() []namedType {
	enum4 := &btf.Enum{Name: "dir", Size: 4, Values: []btf.EnumValue{
		{Name: "H2D", Value: 1}, {Name: "D2H", Value: 2}, {Name: "AGAIN", Value: 1}, {Name: "ZERO", Value: 0},
	}}
	var long []btf.EnumValue
	for i := range 40 {
		long = append(long, btf.EnumValue{Name: fmt.Sprintf("V%d", i), Value: uint64(i % 30)})
	}
	long = append(long, btf.EnumValue{Name: "BIG", Value: 1<<64 - 1})
	enumLong := &btf.Enum{Name: "long", Size: 8, Values: long}

	inner := &btf.Struct{Name: "inner", Size: 8, Members: []btf.Member{
		{Name: "a", Type: tU16},
		{Name: "b", Type: tS16, Offset: 16},
		{Name: "c", Type: tU32, Offset: 32},
	}}
	union := &btf.Union{Name: "u", Size: 8, Members: []btf.Member{
		{Name: "u64", Type: tU64},
		{Name: "s32", Type: tS32},
		{Name: "bytes", Type: &btf.Array{Type: tU8, Nelems: 8}},
		{Name: "in", Type: inner},
	}}
	nested := &btf.Struct{Name: "nested", Size: 64, Members: []btf.Member{
		{Name: "hdr", Type: inner},
		{Name: "u", Type: union, Offset: 64},
		{Name: "ptr", Type: &btf.Pointer{Target: inner}, Offset: 128},
		{Name: "comm", Type: &btf.Array{Type: tChar, Nelems: 16}, Offset: 192},
		{Name: "pair", Type: &btf.Array{Type: inner, Nelems: 2}, Offset: 320},
		// Anonymous integer: printed without a name. Anonymous
		// aggregates are skipped as padding.
		{Type: tU8, Offset: 448},
		{Type: inner, Offset: 448},
		{Name: "dir", Type: &btf.Typedef{Name: "dir_t", Type: enum4}, Offset: 456},
		{Name: "flag", Type: &btf.Const{Type: tBool}, Offset: 488},
	}}
	bitfields := &btf.Struct{Name: "bits", Size: 8, Members: []btf.Member{
		{Name: "lo", Type: tU32, Offset: 0, BitfieldSize: 3},
		{Name: "mid", Type: tU32, Offset: 3, BitfieldSize: 13},
		{Type: tU32, Offset: 16, BitfieldSize: 4},
		{Name: "sgn", Type: tS32, Offset: 20, BitfieldSize: 12},
		{Name: "all", Type: tU32, Offset: 32, BitfieldSize: 32},
		{Name: "wide", Type: tU64, Offset: 0, BitfieldSize: 64},
		{Name: "enum", Type: enum4, Offset: 33, BitfieldSize: 2},
	}}
	// The storage unit of "x" overhangs the struct (off 1 + 4 > 4): Format
	// prints it at the top level only if the record has the bytes.
	overhang := &btf.Struct{Name: "overhang", Size: 4, Members: []btf.Member{
		{Name: "c", Type: tChar},
		{Name: "x", Type: tU32, Offset: 8, BitfieldSize: 4},
		{Name: "y", Type: tU16, Offset: 16},
	}}
	// Members past the end, before and after ones that fit.
	pastEnd := &btf.Struct{Name: "past", Size: 4, Members: []btf.Member{
		{Name: "p1", Type: tU32, Offset: 64},
		{Type: tU16, Offset: 96},
		{Name: "in", Type: tU32, Offset: 0},
		{Name: "p2", Type: tU64, Offset: 32},
		{Name: "in2", Type: tU16, Offset: 16},
	}}
	allPastEnd := &btf.Struct{Name: "allpast", Size: 2, Members: []btf.Member{
		{Name: "p1", Type: tU32, Offset: 16},
		{Name: "p2", Type: inner, Offset: 32},
	}}
	self := &btf.Struct{Name: "self", Size: 4}
	self.Members = []btf.Member{{Name: "v", Type: tU16}, {Name: "next", Type: self, Offset: 0}, {Name: "w", Type: tU16, Offset: 16}}
	var deepArr btf.Type = tU8
	for range 12 {
		deepArr = &btf.Array{Type: deepArr, Nelems: 2}
	}
	empty := &btf.Struct{Name: "empty"}
	cycle := &btf.Typedef{Name: "loop"}
	cycle.Type = cycle

	return []namedType{
		{"nil", nil},
		{"u8", tU8}, {"u16", tU16}, {"u32", tU32}, {"u64", tU64},
		{"s8", tS8}, {"s16", tS16}, {"s32", tS32}, {"s64", tS64},
		{"bool", tBool}, {"bool4", &btf.Int{Name: "bool4", Size: 4, Encoding: btf.Bool}},
		{"char", tChar}, {"char by name", tCharName},
		{"u24", &btf.Int{Size: 3}}, {"s24", &btf.Int{Size: 3, Encoding: btf.Signed}},
		{"u128", &btf.Int{Size: 16}}, {"s128", &btf.Int{Size: 16, Encoding: btf.Signed}},
		{"bool128", &btf.Int{Size: 16, Encoding: btf.Bool}}, {"int0", &btf.Int{Size: 0, Encoding: btf.Signed}},
		{"enum1", &btf.Enum{Size: 1, Values: []btf.EnumValue{{Name: "A", Value: 0}, {Name: "B", Value: 255}}}},
		{"enum2", &btf.Enum{Size: 2, Signed: true, Values: []btf.EnumValue{{Name: "NEG", Value: 0xffff}}}},
		{"enum4", enum4}, {"enum long", enumLong}, {"enum0", &btf.Enum{Values: []btf.EnumValue{{Name: "Z", Value: 0}}}},
		{"enum3", &btf.Enum{Size: 3, Values: []btf.EnumValue{{Name: "X", Value: 0x030201}}}},
		{"pointer", &btf.Pointer{Target: tU32}},
		{"pointer to void", &btf.Pointer{Target: &btf.Void{}}},
		{"char[8]", &btf.Array{Type: tChar, Nelems: 8}},
		{"char[40] by name", &btf.Array{Type: tCharName, Nelems: 40}},
		{"const char[5]", &btf.Array{Type: &btf.Const{Type: tChar}, Nelems: 5}},
		{"char[0]", &btf.Array{Type: tChar, Nelems: 0}},
		{"u8[6]", &btf.Array{Type: tU8, Nelems: 6}},
		{"s32[3]", &btf.Array{Type: tS32, Nelems: 3}},
		{"u32[0]", &btf.Array{Type: tU32, Nelems: 0}},
		{"u16[2][3]", &btf.Array{Type: &btf.Array{Type: tU16, Nelems: 3}, Nelems: 2}},
		{"char[2][4]", &btf.Array{Type: &btf.Array{Type: tChar, Nelems: 4}, Nelems: 2}},
		{"empty[3]", &btf.Array{Type: empty, Nelems: 3}},
		{"void[2]", &btf.Array{Type: &btf.Void{}, Nelems: 2}},
		{"unsized[0]", &btf.Array{Type: &btf.FuncProto{Return: tU32}, Nelems: 0}},
		{"inner[3]", &btf.Array{Type: inner, Nelems: 3}},
		{"deep array", deepArr},
		{"inner", inner}, {"union", union}, {"nested", nested},
		{"bitfields", bitfields}, {"overhang", overhang}, {"past end", pastEnd}, {"all past end", allPastEnd},
		{"self", self}, {"empty", empty},
		{"typedef", &btf.Typedef{Name: "u64_t", Type: tU64}},
		{"const volatile", &btf.Const{Type: &btf.Volatile{Type: &btf.Typedef{Name: "ev", Type: traceEvent}}}},
		{"restrict typetag", &btf.Restrict{Type: &btf.TypeTag{Value: "user", Type: &btf.Pointer{Target: tU8}}}},
		{"typedef cycle", cycle},
		{"float", &btf.Float{Name: "float", Size: 4}}, {"double", &btf.Float{Name: "double", Size: 8}},
		{"long double", &btf.Float{Name: "long double", Size: 16}},
		{"void", &btf.Void{}},
		{"raw members", &btf.Struct{Name: "raw", Size: 32, Members: []btf.Member{
			{Name: "d1", Type: &btf.Datasec{Size: 1}},
			{Name: "h", Type: &btf.Float{Size: 2}, Offset: 8},
			{Name: "f", Type: &btf.Float{Size: 4}, Offset: 32},
			{Name: "d", Type: &btf.Float{Size: 8}, Offset: 64},
			{Name: "ld", Type: &btf.Float{Size: 16}, Offset: 128},
			{Name: "v", Type: &btf.Void{}, Offset: 128},
			{Name: "fn", Type: &btf.FuncProto{}, Offset: 128},
		}}},
		{"datasec", &btf.Datasec{Name: ".data", Size: 6}},
		{"var (unsized)", &btf.Var{Name: "v", Type: tU32}},
		{"func proto (unsized)", &btf.FuncProto{Return: tU32}},
		{"fwd (unsized)", &btf.Fwd{Name: "f"}},
		{"trace_event", traceEvent},
	}
}

// testBuffers returns the values to format as t: short, exact and long, of
// zeros, 0xff, printable text and random bytes.
func testBuffers(t btf.Type, rng *rand.Rand) [][]byte {
	size, _ := btf.Sizeof(t)
	lens := []int{0, 1, 2, 3, 4, 5, 8, 9, 16, size - 1, size, size + 1, size + 3, size + 8, size + 16}
	var out [][]byte
	for _, n := range lens {
		if n < 0 || n > 1<<16 {
			continue
		}
		zero := make([]byte, n)
		ones := bytes.Repeat([]byte{0xff}, n)
		text := make([]byte, n)
		for i := range text {
			text[i] = "vec_add\"\\\x01\xc3\xa9\x00"[rng.IntN(12)]
		}
		small := make([]byte, n) // small numbers, so enums and bools match
		for i := range small {
			if i%4 == 0 {
				small[i] = byte(rng.IntN(4))
			}
		}
		random := make([]byte, n)
		for i := range random {
			random[i] = byte(rng.Uint32())
		}
		out = append(out, zero, ones, text, small, random)
	}
	return out
}

// check formats b as t with Compile+Append (into a non-empty dst) and with
// Format, and compares both with the original implementation.
func check(t *testing.T, name string, typ btf.Type, f *Formatter, b []byte) {
	t.Helper()
	want := refFormat(typ, b)
	prefix := []byte("x{ ")
	got := f.Append(prefix, b)
	if !bytes.Equal(got[:len(prefix)], []byte("x{ ")) || string(got[len(prefix):]) != want {
		t.Fatalf("%s: Append(% x) = %q, want %q", name, b, got[len(prefix):], want)
	}
	if got := Format(typ, b); got != want {
		t.Fatalf("%s: Format(% x) = %q, want %q", name, b, got, want)
	}
}

func TestAppendMatchesFormat(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range testTypes() {
		f := Compile(tc.typ)
		for _, b := range testBuffers(tc.typ, rng) {
			check(t, tc.name, tc.typ, f, b)
		}
	}
}

func TestAppendExamples(t *testing.T) {
	types := map[string]btf.Type{}
	for _, tc := range testTypes() {
		types[tc.name] = tc.typ
	}
	for _, tc := range []struct {
		typ  string
		b    []byte
		want string
	}{
		{"trace_event", traceEventRecord(1712), "{ts=1712 block_x=3 block_y=1 block_z=1 thread_x=31 thread_y=0 thread_z=0 pad=0}"},
		{"s8", []byte{0x80}, "-128"},
		{"s24", []byte{0xff, 0xff, 0xff}, "-1"},
		{"s128", bytes.Repeat([]byte{0xff}, 16), "0"},
		{"bool4", []byte{0, 1, 0, 0}, "true"},
		{"enum4", []byte{1, 0, 0, 0}, "H2D"},
		{"enum4", []byte{7, 0, 0, 0}, "7"},
		{"enum long", []byte{29, 0, 0, 0, 0, 0, 0, 0}, "V29"},
		{"enum long", bytes.Repeat([]byte{0xff}, 8), "BIG"},
		{"pointer", []byte{0xef, 0xbe, 0xad, 0xde, 0, 0, 0, 0}, "0xdeadbeef"},
		{"char[8]", []byte("vec\x00add!"), `"vec"`},
		{"char[8]", []byte("a\"b\\\n\xff\xc3\xa9"), `"a\"b\\\n\xffé"`},
		{"u16[2][3]", []byte{1, 0, 2, 0, 3, 0, 4, 0, 5, 0, 6, 0}, "[[1 2 3] [4 5 6]]"},
		{"empty[3]", []byte{0xab, 0xcd}, "52651"},
		{"empty[3]", []byte{0xab, 0xcd, 0xef}, "abcdef"},
		{"bitfields", []byte{0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0}, "{lo=7 mid=8191 15 sgn=4095 all=2 wide=12884901887 enum=1}"},
		{"overhang", []byte{'a', 0xf5, 2, 0}, "{c=97 y=2}"},
		{"overhang", []byte{'a', 0xf5, 2, 0, 0}, "{c=97 x=5 y=2}"},
		{"past end", []byte{1, 0, 2, 0}, "{in=131073 in2=2}"},
		{"past end", []byte{1, 0, 2, 0, 0, 0, 0, 0, 9, 0, 0, 0, 8, 0}, "{p1=9 8 in=131073 p2=38654705664 in2=2}"},
		{"all past end", []byte{1, 0}, "{}"},
		{"all past end", []byte{1, 0, 2, 0, 0, 0}, "{p1=2}"},
		{"self", []byte{1, 0, 2, 0}, "{v=1 next={v=1 next={v=1 next={v=1 next={v=1 next={v=1 next={v=1 next={v=1 next={v=… next=… w=…} w=2} w=2} w=2} w=2} w=2} w=2} w=2} w=2}"},
		{"float", []byte{0, 0, 0x80, 0x3f}, "1065353216"},
		{"var (unsized)", []byte{1, 0, 0, 0}, "1"},
	} {
		f := Compile(types[tc.typ])
		if got := string(f.Append(nil, tc.b)); got != tc.want {
			t.Errorf("%s % x: got %s, want %s", tc.typ, tc.b, got, tc.want)
		}
		if got := refFormat(types[tc.typ], tc.b); got != tc.want {
			t.Errorf("%s % x: the original Format gives %s, want %s", tc.typ, tc.b, got, tc.want)
		}
	}
}

func TestNilFormatter(t *testing.T) {
	var f *Formatter
	if got := string(f.Append([]byte("k="), []byte{1, 0})); got != "k=1" {
		t.Errorf("got %s", got)
	}
}

// randomType builds a random, possibly malformed, type: any kind, members
// anywhere (past the end too), bitfields, anonymous members, cycles.
func randomType(rng *rand.Rand, depth int, structs *[]*btf.Struct) btf.Type {
	k := rng.IntN(14)
	if depth > 4 && k >= 8 {
		k = rng.IntN(8)
	}
	switch k {
	case 0, 1:
		sizes := []uint32{0, 1, 1, 2, 3, 4, 4, 8, 8, 16}
		encs := []btf.IntEncoding{btf.Unsigned, btf.Signed, btf.Char, btf.Bool, btf.Signed | btf.Char}
		names := []string{"int", "char", "x"}
		return &btf.Int{Name: names[rng.IntN(3)], Size: sizes[rng.IntN(len(sizes))], Encoding: encs[rng.IntN(len(encs))]}
	case 2:
		e := &btf.Enum{Size: []uint32{0, 1, 2, 4, 8, 3}[rng.IntN(6)]}
		for i := range rng.IntN(24) {
			e.Values = append(e.Values, btf.EnumValue{Name: fmt.Sprint("E", i), Value: uint64(rng.IntN(6))})
		}
		return e
	case 3:
		return &btf.Pointer{Target: &btf.Void{}}
	case 4:
		return &btf.Float{Size: []uint32{2, 4, 8, 16}[rng.IntN(4)]}
	case 5:
		return []btf.Type{&btf.Void{}, &btf.FuncProto{}, &btf.Var{Name: "v", Type: &btf.Int{Size: 4}}, &btf.Datasec{Size: 3}}[rng.IntN(4)]
	case 6:
		if len(*structs) > 0 {
			return (*structs)[rng.IntN(len(*structs))] // cycle or shared
		}
		return &btf.Int{Size: 2}
	case 7:
		return &btf.Array{Type: &btf.Int{Name: "char", Size: 1, Encoding: btf.Char}, Nelems: uint32(rng.IntN(12))}
	case 8, 9:
		return &btf.Array{Type: randomType(rng, depth+1, structs), Nelems: uint32(rng.IntN(4))}
	case 10:
		switch rng.IntN(3) {
		case 0:
			return &btf.Typedef{Name: "td", Type: randomType(rng, depth+1, structs)}
		case 1:
			return &btf.Const{Type: randomType(rng, depth+1, structs)}
		default:
			return &btf.Volatile{Type: randomType(rng, depth+1, structs)}
		}
	default:
		s := &btf.Struct{}
		*structs = append(*structs, s)
		var members []btf.Member
		off := 0
		for i := range rng.IntN(6) {
			m := btf.Member{Type: randomType(rng, depth+1, structs)}
			if rng.IntN(5) > 0 {
				m.Name = fmt.Sprint("m", i)
			}
			size, err := btf.Sizeof(m.Type)
			if err != nil {
				size = 1
			}
			if rng.IntN(4) == 0 {
				off = rng.IntN(off + 8) // overlapping or anywhere
			}
			m.Offset = btf.Bits(off * 8)
			if rng.IntN(5) == 0 {
				m.Offset += btf.Bits(rng.IntN(8))
				m.BitfieldSize = btf.Bits(rng.IntN(70))
			}
			off += size
			members = append(members, m)
		}
		size := off
		if rng.IntN(3) == 0 {
			size = rng.IntN(off + 4) // too small or too large
		}
		if k == 11 {
			return &btf.Union{Size: uint32(size), Members: members}
		}
		s.Size, s.Members = uint32(size), members
		return s
	}
}

func TestAppendMatchesFormatRandomTypes(t *testing.T) {
	n := 3000
	if testing.Short() {
		n = 300
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range n {
		var structs []*btf.Struct
		typ := randomType(rng, 0, &structs)
		f := Compile(typ)
		for _, b := range testBuffers(typ, rng) {
			check(t, fmt.Sprintf("random type %d %v", i, typ), typ, f, b)
		}
	}
}

func FuzzAppendMatchesFormat(f *testing.F) {
	types := testTypes()
	f.Add(uint8(0), uint64(0), []byte("0123456789ab"))
	f.Add(uint8(len(types)-1), uint64(1), traceEventRecord(1712))
	f.Add(uint8(3), uint64(2), []byte{1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Fuzz(func(t *testing.T, which uint8, seed uint64, b []byte) {
		// A fixed type, and one built at random from the seed.
		tc := types[int(which)%len(types)]
		check(t, tc.name, tc.typ, Compile(tc.typ), b)
		var structs []*btf.Struct
		typ := randomType(rand.New(rand.NewPCG(seed, 0)), 0, &structs)
		check(t, fmt.Sprintf("seed %d", seed), typ, Compile(typ), b)
	})
}

func TestAppendDoesNotAllocate(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, tc := range testTypes() {
		f := Compile(tc.typ)
		for _, b := range testBuffers(tc.typ, rng) {
			buf := f.Append(nil, b)
			if n := testing.AllocsPerRun(10, func() { buf = f.Append(buf[:0], b) }); n != 0 {
				t.Errorf("%s: Append(% x) allocates %v times", tc.name, b, n)
			}
		}
	}
}

func TestNumbers(t *testing.T) {
	var vs []uint64
	for i := range 64 {
		x := uint64(1) << i
		vs = append(vs, x-1, x, x+1)
	}
	for p, i := uint64(1), 0; i < 20; i, p = i+1, p*10 {
		vs = append(vs, p-1, p, p+1, 9*p, 10*p-1)
	}
	rng := rand.New(rand.NewPCG(7, 8))
	for range 10000 {
		vs = append(vs, rng.Uint64()>>rng.IntN(64))
	}
	for _, v := range vs {
		prefix := make([]byte, 3, 3+numRoom) // exactly the room run guarantees
		if got, want := putUint(prefix, v), strconv.FormatUint(v, 10); string(got[3:]) != want {
			t.Fatalf("putUint(%d) = %s", v, got[3:])
		}
		if got, want := putInt(prefix, int64(v)), strconv.FormatInt(int64(v), 10); string(got[3:]) != want {
			t.Fatalf("putInt(%d) = %s", int64(v), got[3:])
		}
		if got, want := putHex(prefix, v), strconv.FormatUint(v, 16); string(got[3:]) != want {
			t.Fatalf("putHex(%#x) = %s", v, got[3:])
		}
	}
}

// TestCompileIndependentOfFormat checks that Format's reused scratch space
// is not shared with Formatters from Compile.
func TestCompileIndependentOfFormat(t *testing.T) {
	f := Compile(traceEvent)
	rec := traceEventRecord(42)
	want := refFormat(traceEvent, rec)
	rng := rand.New(rand.NewPCG(9, 10))
	for _, tc := range testTypes() {
		for _, b := range testBuffers(tc.typ, rng) {
			_ = Format(tc.typ, b)
		}
	}
	if got := string(f.Append(nil, rec)); got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

func TestFormatConcurrent(t *testing.T) {
	types := testTypes()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 11))
			for range 20 {
				for _, tc := range types {
					b := testBuffers(tc.typ, rng)[rng.IntN(20)]
					if got, want := Format(tc.typ, b), refFormat(tc.typ, b); got != want {
						t.Errorf("%s: Format(% x) = %q, want %q", tc.name, b, got, want)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
}

func traceEventRecord(ts uint64) []byte {
	b := make([]byte, 40)
	binary.LittleEndian.PutUint64(b, ts)
	for i, v := range []uint32{3, 1, 1, 31, 0, 0, 0} {
		binary.LittleEndian.PutUint32(b[8+4*i:], v)
	}
	return b
}

func benchTraceEvent(b *testing.B, format func(dst, rec []byte) []byte) {
	rec := traceEventRecord(0)
	const ts0 = 1712345678901234
	var dst []byte
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		binary.LittleEndian.PutUint64(rec, ts0+uint64(i))
		dst = format(dst[:0], rec)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkAppendTraceEvent is the compiled path: Compile once, Append per
// record into a reused buffer.
func BenchmarkAppendTraceEvent(b *testing.B) {
	f := Compile(traceEvent)
	benchTraceEvent(b, f.Append)
}

// BenchmarkFormatTraceEvent is Format per record (Compile every time).
func BenchmarkFormatTraceEvent(b *testing.B) {
	benchTraceEvent(b, func(dst, rec []byte) []byte { return append(dst, Format(traceEvent, rec)...) })
}

// BenchmarkRefFormatTraceEvent is the original, type-walking Format.
func BenchmarkRefFormatTraceEvent(b *testing.B) {
	benchTraceEvent(b, func(dst, rec []byte) []byte { return append(dst, refFormat(traceEvent, rec)...) })
}

func TestFormatLargeValue(t *testing.T) {
	typ := &btf.Array{Type: tU16, Nelems: 50000}
	b := make([]byte, 100000)
	for i := range b {
		b[i] = byte(i * 7)
	}
	for range 2 { // the second call must not reuse an oversized buffer
		if got, want := Format(typ, b), refFormat(typ, b); got != want {
			t.Fatalf("Format of u16[50000] differs from the original")
		}
	}
}
