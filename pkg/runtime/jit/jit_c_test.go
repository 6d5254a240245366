package jit

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/gpubpf/gpubpf/internal/testenv"
	"github.com/gpubpf/gpubpf/pkg/runtime/gpumap"
)

//go:generate sh -c "for f in ../../../bpf/testdata/*.bpf.c ../../../bpf/bench/*.bpf.c; do clang -O2 -g -mcpu=v3 -target bpf -fdebug-compilation-dir=. -I../../../bpf -I../../../bpf/include -c $DOLLAR{f} -o $DOLLAR{f%.c}.o; done"

// loadGPU reads a clang-built object and places its maps like `gpubpf ptx`.
func loadGPU(t *testing.T, path string) (map[string]*ebpf.ProgramSpec, Options) {
	t.Helper()
	spec, err := ebpf.LoadCollectionSpec(path)
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{Maps: map[string]gpumap.Placement{}, Printk: testPrintk, PID: 42}
	i := uint64(0)
	for name, ms := range spec.Maps {
		pl, err := gpumap.PlacementOf(ms)
		if err != nil {
			continue
		}
		i++
		pl.Addr = 0x7f0000000000 + i<<28
		opts.Maps[name] = pl
	}
	progs := map[string]*ebpf.ProgramSpec{}
	for name, p := range spec.Programs {
		if strings.HasPrefix(p.SectionName, "kprobe/") || strings.HasPrefix(p.SectionName, "kretprobe/") {
			progs[name] = p
		}
	}
	return progs, opts
}

// TestClangObjects compiles clang-built C programs (every map kind, helper,
// atomics, loops, a subprogram, globals, ctx) and assembles them.
func TestClangObjects(t *testing.T) {
	for _, obj := range []string{"../../../bpf/testdata/jit_all.bpf.o", "../../../bpf/bench/probe_counter.bpf.o", "../../../bpf/examples/counter_bpfel.o", "../../../bpf/examples/trace_bpfel.o",
		"../../../bpf/examples/host_map_bpfel.o"} {
		progs, opts := loadGPU(t, obj)
		if len(progs) == 0 {
			t.Fatalf("%s: no GPU programs", obj)
		}
		var fns []*Function
		for name, p := range progs {
			o := opts
			o.FuncName = "f_" + name
			f, err := Compile(p, o)
			if err != nil {
				t.Fatalf("%s: %v", obj, err)
			}
			// clang spills ctx in "all" (register pressure) and reads
			// the int at 24: the spill is followed, not taken for an
			// escape.
			if name == "all" && f.CtxBytes != 28 {
				t.Errorf("%s: %s: CtxBytes %d, want 28", obj, name, f.CtxBytes)
			}
			fns = append(fns, f)
		}
		assembleModule(t, TestModuleAll(fns, "sm_90"))
	}
}

func assembleModule(t *testing.T, mod string) {
	t.Helper()
	ptxas := testenv.Ptxas(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "m.ptx")
	writeFile(t, src, mod)
	if out, err := exec.Command(ptxas, "-arch=sm_90", src, "-o", filepath.Join(dir, "m.cubin")).CombinedOutput(); err != nil {
		t.Fatalf("ptxas: %v\n%s", err, out)
	}
}

// TestRefusalNamesSourceLine: a tail call is refused with the C line.
func TestRefusalNamesSourceLine(t *testing.T) {
	progs, opts := loadGPU(t, "../../../bpf/testdata/tailcall.bpf.o")
	_, err := Compile(progs["tail"], opts)
	if err == nil {
		t.Fatal("tail call compiled")
	}
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "tailcall.bpf.c:18") || !strings.Contains(err.Error(), "bpf_tail_call(ctx, &progs, 0)") {
		t.Fatalf("error does not name the C source line: %v", err)
	}
	t.Log(err)
}

// TestProbeCounterSASS: the benchmark probes. The empty one inlines to
// nothing; the counter's cost in SASS instructions is logged.
func TestProbeCounterSASS(t *testing.T) {
	progs, opts := loadGPU(t, "../../../bpf/bench/probe_counter.bpf.o")
	opts.FuncName = "probe_empty"
	e, err := Compile(progs["probe_empty"], opts)
	if err != nil {
		t.Fatal(err)
	}
	opts.FuncName = "probe_counter"
	c, err := Compile(progs["probe_counter"], opts)
	if err != nil {
		t.Fatal(err)
	}
	mod := ".version 7.8\n.target sm_90\n.address_size 64\n\n" + e.PTX + c.PTX + vecAddLike("plain", "") +
		vecAddLike("empty", e.InlineBody("0", "", "pe")) + vecAddLike("counter", c.InlineBody("0", "", "pc"))
	s := sassSizes(t, mod, "plain", "empty", "counter")
	t.Logf("vec_add sass bytes: plain=%d empty-probe=%d counter-probe=%d (+%d instructions)", s["plain"], s["empty"], s["counter"], (s["counter"]-s["plain"])/16)
	if s["empty"] != s["plain"] {
		t.Fatalf("empty probe adds %d bytes of SASS", s["empty"]-s["plain"])
	}
}
