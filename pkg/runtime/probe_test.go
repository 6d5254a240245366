package runtime

import (
	"testing"

	"github.com/cilium/ebpf"

	"github.com/gpubpf/gpubpf/pkg/runtime/jit"
)

// TestProbeCtxBytes: the injected probe carries how far its programs read
// ctx, the furthest of them where several share a site.
func TestProbeCtxBytes(t *testing.T) {
	d := &device{funcs: map[string]*jit.Function{
		"a": {Name: "a", UsesCtx: true, CtxBytes: 24},
		"b": {Name: "b", UsesCtx: true, CtxBytes: 200},
		"c": {Name: "c"},
	}}
	prog := func(name string) GPUProgram { return GPUProgram{Spec: &ebpf.ProgramSpec{Name: name}} }
	for _, c := range []struct {
		progs []GPUProgram
		uses  bool
		want  int
	}{
		{[]GPUProgram{prog("a")}, true, 24},
		{[]GPUProgram{prog("c")}, false, 0},
		{[]GPUProgram{prog("a"), prog("b"), prog("c")}, true, 200},
		{[]GPUProgram{prog("c"), prog("a")}, true, 24},
	} {
		p, err := d.probeFor(c.progs, "entry")
		if err != nil {
			t.Fatal(err)
		}
		if p.UsesCtx != c.uses || p.CtxBytes != c.want {
			t.Errorf("%d programs: UsesCtx %v CtxBytes %d, want %v %d", len(c.progs), p.UsesCtx, p.CtxBytes, c.uses, c.want)
		}
	}
}
