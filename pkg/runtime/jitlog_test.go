package runtime

import (
	"reflect"
	"testing"
)

func TestJITResources(t *testing.T) {
	for _, c := range []struct {
		name, log string
		want      []string
	}{
		{"empty", "", nil},
		{"entry and device function", `info    : 0 bytes gmem
info    : Compiling entry function '_Z9vectorAddPKfS0_Pfi' for 'sm_90'
info    : Function properties for _Z9vectorAddPKfS0_Pfi
    8 bytes stack frame, 0 bytes spill stores, 4 bytes spill loads
info    : Used 38 registers, 380 bytes cmem[0]
info    : Function properties for gpubpf_probe
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
`, []string{"_Z9vectorAddPKfS0_Pfi: 38 registers, 8 bytes stack, 0/4 bytes spilled/reloaded"}},
		{"ptxas prefix, no frame line", `ptxas info    : Compiling entry function 'k' for 'sm_80'
ptxas info    : Used 16 registers, 360 bytes cmem[0]
`, []string{"k: 16 registers"}},
	} {
		if got := jitResources(c.log); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: got %q, want %q", c.name, got, c.want)
		}
	}
}
