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

// TestProbeSetBySite: memory-access programs get a site of their own in a
// kernel's probe set, and a set with them never shares a clone with one
// without (the key tells them apart).
func TestProbeSetBySite(t *testing.T) {
	prog := func(name string, site ProbeSite) GPUProgram {
		return GPUProgram{Spec: &ebpf.ProgramSpec{Name: name}, Site: site}
	}
	var ps probeSet
	for _, g := range []GPUProgram{prog("in", SiteEntry), prog("out", SiteExit), prog("m1", SiteMem), prog("m2", SiteMem)} {
		ps.add(g)
	}
	if len(ps.entry) != 1 || len(ps.exit) != 1 || len(ps.mem) != 2 {
		t.Fatalf("set %+v", ps)
	}
	if k := ps.key(); k != "e:in;x:out;m:m1;m:m2;" {
		t.Errorf("key %q", k)
	}
	var entryOnly probeSet
	entryOnly.add(prog("m1", SiteEntry))
	var memOnly probeSet
	memOnly.add(prog("m1", SiteMem))
	if entryOnly.key() == memOnly.key() {
		t.Error("one program at entry and at memory accesses give the same key")
	}
	d := &device{funcs: map[string]*jit.Function{"m1": {Name: "gpubpf_m1", UsesCtx: true, CtxBytes: 16}, "m2": {Name: "gpubpf_m2"}}}
	p, err := d.probeFor(ps.mem, "mem")
	if err != nil {
		t.Fatal(err)
	}
	if p.Func != "gpubpf_mem_all" || !p.UsesCtx || p.CtxBytes != 16 {
		t.Errorf("probe for two memory programs: %s UsesCtx %v CtxBytes %d", p.Func, p.UsesCtx, p.CtxBytes)
	}
}
