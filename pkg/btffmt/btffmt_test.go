package btffmt

import (
	"testing"

	"github.com/cilium/ebpf/btf"
)

func TestFormat(t *testing.T) {
	u32 := &btf.Int{Name: "unsigned int", Size: 4}
	s64 := &btf.Int{Name: "long long", Size: 8, Encoding: btf.Signed}
	char := &btf.Int{Name: "char", Size: 1, Encoding: btf.Char}
	ev := &btf.Struct{Name: "event", Size: 24, Members: []btf.Member{
		{Name: "pid", Type: u32, Offset: 0},
		{Name: "delta", Type: s64, Offset: 64},
		{Name: "comm", Type: &btf.Array{Type: char, Nelems: 8}, Offset: 128},
	}}
	rec := []byte{
		0x92, 0x10, 0, 0, 0, 0, 0, 0, // pid 4242 + padding
		0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, // -2
		'v', 'e', 'c', 0, 'x', 'x', 'x', 'x',
	}
	for _, tc := range []struct {
		name string
		typ  btf.Type
		b    []byte
		want string
	}{
		{"struct", ev, rec, `{pid=4242 delta=-2 comm="vec"}`},
		{"typedef u64", &btf.Typedef{Name: "u64", Type: &btf.Int{Size: 8}}, []byte{1, 0, 0, 0, 0, 0, 0, 0}, "1"},
		{"array of u32", &btf.Array{Type: u32, Nelems: 2}, []byte{1, 0, 0, 0, 2, 0, 0, 0}, "[1 2]"},
		{"enum", &btf.Enum{Size: 4, Values: []btf.EnumValue{{Name: "H2D", Value: 1}}}, []byte{1, 0, 0, 0}, "H2D"},
		{"no type, 8 bytes", nil, []byte{7, 0, 0, 0, 0, 0, 0, 0}, "7"},
		{"no type, odd size", nil, []byte{0xde, 0xad, 0xbe}, "deadbe"},
		{"short buffer falls back to raw", ev, []byte{1, 2}, "513"},
	} {
		if got := Format(tc.typ, tc.b); got != tc.want {
			t.Errorf("%s: got %s, want %s", tc.name, got, tc.want)
		}
	}
}

func FuzzFormat(f *testing.F) {
	u32 := &btf.Int{Name: "unsigned int", Size: 4}
	typ := &btf.Struct{Size: 12, Members: []btf.Member{
		{Name: "a", Type: u32},
		{Name: "b", Type: &btf.Array{Type: &btf.Int{Size: 1, Encoding: btf.Char}, Nelems: 8}, Offset: 32},
	}}
	f.Add([]byte("0123456789ab"))
	f.Fuzz(func(t *testing.T, b []byte) {
		_ = Format(typ, b)
		_ = Format(nil, b)
	})
}
