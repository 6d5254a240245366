package jit

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/gpubpf/gpubpf/pkg/runtime/gpumap"
)

// TestToolProbesNeedNoCtx: none of the tools' GPU programs reads the
// kernel's parameters, so none may make the instrumented kernel copy them
// to local memory in every thread (a per-thread cost that grew with the
// grid: launchlate cost vec_add x1.75 at a million threads that way).
func TestToolProbesNeedNoCtx(t *testing.T) {
	objs, err := filepath.Glob("../../../tools/*/*_bpfel.o")
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, o := range objs {
		spec, err := ebpf.LoadCollectionSpec(o)
		if err != nil {
			t.Fatalf("%s: %v", o, err)
		}
		maps := map[string]gpumap.Placement{}
		i := uint64(0)
		for name, ms := range spec.Maps {
			p, err := gpumap.PlacementOf(ms)
			if err != nil {
				continue // a CPU-only map: the GPU programs do not use it
			}
			i++
			p.Addr = 0x7f0000000000 + i<<28
			maps[name] = p
		}
		for _, ps := range spec.Programs {
			if !strings.HasPrefix(ps.SectionName, "gpu/") {
				continue
			}
			f, err := Compile(ps, Options{Maps: maps, Printk: testPrintk, FuncName: "p"})
			if err != nil {
				t.Fatalf("%s %s: %v", o, ps.Name, err)
			}
			seen++
			if f.UsesCtx {
				t.Errorf("%s: %s (%s) claims ctx (%d bytes): every thread would copy the kernel's parameters", o, ps.Name, ps.SectionName, f.CtxBytes)
			}
		}
	}
	if seen < 4 { // launchlate, threadhist, kernelretsnoop, kernel_trace: one each
		t.Fatalf("found %d GPU programs in %d tool objects; want the tools' (at least 4)", seen, len(objs))
	}
}
