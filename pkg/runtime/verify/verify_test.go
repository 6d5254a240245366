package verify_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"

	"github.com/gpubpf/gpubpf/internal/testenv"
	"github.com/gpubpf/gpubpf/pkg/runtime"
	"github.com/gpubpf/gpubpf/pkg/runtime/gpumap"
	"github.com/gpubpf/gpubpf/pkg/runtime/jit"
	"github.com/gpubpf/gpubpf/pkg/runtime/verify"
)

//go:generate sh -c "for f in testdata/*.bpf.c; do clang -O2 -g -mcpu=v3 -target bpf -fdebug-compilation-dir=. -I../../../bpf -I../../../bpf/include -c $DOLLAR{f} -o $DOLLAR{f%.c}.o; done"

func needRoot(t *testing.T) { t.Helper(); testenv.Root(t) }

func gpuPrograms(t *testing.T, file string) (*ebpf.CollectionSpec, []*ebpf.ProgramSpec) {
	t.Helper()
	spec, err := ebpf.LoadCollectionSpec(file)
	if err != nil {
		t.Fatal(err)
	}
	gpu, _, err := runtime.SplitPrograms(spec)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	var out []*ebpf.ProgramSpec
	for _, g := range gpu {
		out = append(out, g.Spec)
	}
	return spec, out
}

// The unsafe shapes: each refused on its BAD line with the right reason.
func TestRefusesUnsafe(t *testing.T) {
	needRoot(t)
	spec, progs := gpuPrograms(t, "testdata/unsafe.bpf.o")
	want := map[string]string{
		"null_deref":     "without checking it for NULL",
		"stack_by_tid":   "stack outside its frame",
		"endless":        "", // memory-safe: accepted with the loop budget (TestDataBoundedLoops)
		"leak_store":     "copies a pointer",
		"leak_update":    "copies a pointer",
		"ctx_far":        "outside its size",
		"deref_arg":      "bpf_probe_read_kernel",
		"ring_unchecked": "without checking it for NULL",
		"misaligned":     "not aligned",
		"cpu_helper":     "bpf_get_current_comm, which GPU programs cannot call",
		"value_oob":      "outside its size",
		"max_unchecked":  "without checking it for NULL",
	}
	if !kernelAtLeast(6, 9) {
		want["endless"] = "run forever" // no may_goto: no second look at its loop
	}
	if len(progs) != len(want) {
		t.Fatalf("unsafe.bpf.o has %d GPU programs, the test knows %d", len(progs), len(want))
	}
	for _, p := range progs {
		t.Run(p.Name, func(t *testing.T) {
			v, err := verify.Judge(spec, p, verify.Options{})
			if want[p.Name] == "" {
				if err != nil || !v.LoopBudget {
					t.Fatalf("a loop that may never end but is memory-safe: %+v %v, want accepted with the loop budget", v, err)
				}
				return
			}
			var e *verify.Error
			if !errors.As(err, &e) {
				t.Fatalf("want a refusal, got %v", err)
			}
			msg := e.Error()
			t.Log(msg)
			if !strings.Contains(msg, want[p.Name]) {
				t.Errorf("message does not say %q", want[p.Name])
			}
			if !strings.Contains(e.Source, "/* BAD */") || !strings.Contains(msg, "unsafe.bpf.c:") {
				t.Errorf("refused at %q, not at the line marked BAD", e.Source)
			}
			if !strings.Contains(msg, p.Name) || !strings.Contains(msg, "kprobe/vectorAdd") {
				t.Errorf("message does not name the program and its section")
			}
		})
	}
}

// A loop whose bound comes from a map value (bpftime's direct-run GEMM):
// the verifier cannot bound it, so it is checked once for every iteration
// (the registers its body sets made unknown at its head). A direct run
// accepts it as it is; a probe, which must end, with the GPU's iteration
// budget on its loop heads; an unsafe access inside such a loop is refused
// either way.
func TestDataBoundedLoops(t *testing.T) {
	needRoot(t)
	if !kernelAtLeast(6, 9) {
		t.Skip("the kernel's verifier has no may_goto before Linux 6.9: data-bounded loops stay refused there")
	}
	spec, _ := gpuPrograms(t, "testdata/loops.bpf.o")
	prog := func(name string) *ebpf.ProgramSpec {
		p := spec.Programs[name]
		if p == nil {
			t.Fatalf("loops.bpf.o has no program %s", name)
		}
		return p
	}
	if v, err := verify.Judge(spec, prog("data_bounded"), verify.Options{Direct: true}); err != nil || v.LoopBudget {
		t.Fatalf("direct run of a data-bounded loop: %+v %v, want accepted as it is", v, err)
	}
	var e *verify.Error
	if v, err := verify.Judge(spec, prog("data_bounded_probe"), verify.Options{}); err != nil || !v.LoopBudget {
		t.Fatalf("probe with a data-bounded loop: %+v %v, want accepted with the loop budget", v, err)
	}
	for _, name := range []string{"map_bounded_probe", "endless_probe"} {
		if v, err := verify.Judge(spec, prog(name), verify.Options{}); err != nil || !v.LoopBudget {
			t.Fatalf("%s: %+v %v, want accepted with the loop budget", name, v, err)
		}
	}
	// a loop the verifier can bound needs no budget
	if v, err := verify.Judge(spec, prog("bounded_probe"), verify.Options{}); err != nil || v.LoopBudget {
		t.Fatalf("probe with a constant-bounded loop: %+v %v, want accepted without a budget", v, err)
	}
	// the same object's probe, as a direct program, is the same loop: the
	// widening, not the section, makes the difference
	if err := verify.ProgramWith(spec, prog("data_bounded_probe"), verify.Options{Direct: true}); err != nil {
		t.Fatalf("the probe's loop, checked as a direct run: %v", err)
	}
	for _, direct := range []bool{false, true} {
		_, err := verify.Judge(spec, prog("data_bounded_unsafe"), verify.Options{Direct: direct})
		if !errors.As(err, &e) || !strings.Contains(e.Source, "/* BAD */") || !strings.Contains(e.Error(), "stack") {
			t.Fatalf("stack indexed by a data-bounded loop (direct %v): %v, want refused on the BAD line", direct, err)
		}
	}
}

// Every GPU program of the repository's objects is accepted.
func TestAcceptsRepositoryPrograms(t *testing.T) {
	needRoot(t)
	root := "../../.."
	var files []string
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == ".gpu") {
			return filepath.SkipDir
		}
		if strings.HasSuffix(path, ".o") && !refusedOnPurpose[filepath.Base(path)] && isBPF(path) {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	seen := map[string]runtime.ProbeSite{}
	for _, f := range files {
		spec, err := ebpf.LoadCollectionSpec(f)
		if err != nil {
			continue // not a BPF object
		}
		gpu, _, err := runtime.SplitPrograms(spec)
		if err != nil {
			continue
		}
		for _, g := range gpu {
			n++
			rel, _ := filepath.Rel(root, f)
			seen[rel+"/"+g.Spec.Name] = g.Site
			t.Run(rel+"/"+g.Spec.Name, func(t *testing.T) {
				if err := verify.Program(spec, g.Spec); err != nil {
					var e *verify.Error
					if errors.As(err, &e) {
						t.Logf("log:\n%s", strings.Join(e.Log, "\n"))
					}
					t.Fatal(err)
				}
			})
		}
	}
	if n < 10 {
		t.Fatalf("found only %d GPU programs in %d objects under %s", n, len(files), root)
	}
	// Programs of every site, the memory-access one included, are
	// among them.
	for prog, site := range map[string]runtime.ProbeSite{
		"bpf/examples/counter_bpfel.o/vectorAdd_entry": runtime.SiteEntry,
		"bpf/examples/counter_bpfel.o/vectorAdd_exit":  runtime.SiteExit,
		"bpf/examples/mem_trace_bpfel.o/mem_trace":     runtime.SiteMem,
	} {
		if got, ok := seen[prog]; !ok || got != site {
			t.Errorf("%s: checked %v as a %v program, want a %v program", prog, ok, got, site)
		}
	}
}

// refusedOnPurpose are test objects of programs the GPU must refuse.
var refusedOnPurpose = map[string]bool{"unsafe.bpf.o": true, "tailcall.bpf.o": true, "loops.bpf.o": true,
	"refused_bpfel.o": true} // bpf/refused.bpf.c: make demo's refused example

func TestRefusesTailCall(t *testing.T) {
	needRoot(t)
	spec, progs := gpuPrograms(t, "../../../bpf/testdata/tailcall.bpf.o")
	for _, p := range progs {
		err := verify.Program(spec, p)
		if err == nil || !strings.Contains(err.Error(), "bpf_tail_call, which GPU programs cannot call") {
			t.Errorf("%s: want bpf_tail_call refused, got %v", p.Name, err)
		}
	}
}

func isBPF(path string) bool {
	b, err := os.ReadFile(path)
	// ELF, 64-bit, machine EM_BPF (247) at offset 18.
	return err == nil && len(b) > 20 && string(b[:4]) == "\x7fELF" && b[18] == 247
}

// The twin table and the GPU compiler agree on which helpers a GPU program
// may call: a helper the compiler has but the table lacks would be refused
// by the verifier; one the table has but the compiler lacks would pass it.
func TestHelperTableMatchesCompiler(t *testing.T) {
	for id := asm.BuiltinFunc(1); id < 700; id++ {
		p := &ebpf.ProgramSpec{Name: "h", Type: ebpf.Kprobe, Instructions: asm.Instructions{id.Call(), asm.Return()}}
		_, err := jit.Compile(p, jit.Options{Printk: gpumap.Placement{Kind: gpumap.RingBuf, Addr: 1 << 40, MaxEntries: 1 << 20}})
		compiles := !errors.Is(err, jit.ErrUnsupported)
		if compiles != verify.GPUHelper(id) {
			t.Errorf("helper %d (%v): compiler supports it: %v, verifier's table has it: %v (%v)", int32(id), id, compiles, verify.GPUHelper(id), err)
		}
	}
}

// bpftime's host-backed maps (1512 per-thread, 1513 shared) have array
// twins of their shape: a program reading inside a value passes, one
// reading past it is refused as it would be on a 1502/1503 array.
func TestHostBackedMapTwins(t *testing.T) {
	needRoot(t)
	for _, typ := range []ebpf.MapType{gpumap.TypePerThreadHost, gpumap.TypeGPUArrayHost} {
		for off, ok := range map[int16]bool{0: true, 8: false} {
			spec := &ebpf.CollectionSpec{Maps: map[string]*ebpf.MapSpec{
				"m": {Name: "m", Type: typ, KeySize: 4, ValueSize: 8, MaxEntries: 3},
			}}
			p := &ebpf.ProgramSpec{Name: "p", SectionName: "kprobe/vectorAdd", Type: ebpf.Kprobe, License: "GPL", Instructions: asm.Instructions{
				asm.StoreImm(asm.RFP, -4, 2, asm.Word),
				asm.LoadMapPtr(asm.R1, 0).WithReference("m"),
				asm.Mov.Reg(asm.R2, asm.RFP), asm.Add.Imm(asm.R2, -4),
				asm.FnMapLookupElem.Call(),
				asm.JEq.Imm(asm.R0, 0, "out"),
				asm.LoadMem(asm.R1, asm.R0, off, asm.DWord),
				asm.Mov.Imm(asm.R0, 0).WithSymbol("out"),
				asm.Return(),
			}}
			spec.Programs = map[string]*ebpf.ProgramSpec{"p": p}
			err := verify.Program(spec, p)
			if ok && err != nil || !ok && err == nil {
				t.Errorf("type %d, load at value offset %d: %v (want accepted: %v)", typ, off, err, ok)
			}
		}
	}
}

// kernelAtLeast reports whether the running kernel is major.minor or newer.
func kernelAtLeast(major, minor int) bool {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return false
	}
	var ma, mi int
	fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &ma, &mi)
	return ma > major || ma == major && mi >= minor
}

// Prints tells the programs whose trace_printk ring has lines to show
// (drained every 10 ms) from those where it only counts spent budgets.
func TestPrints(t *testing.T) {
	for _, tc := range []struct {
		name string
		ins  asm.Instructions
		want bool
	}{
		{"trace_printk", asm.Instructions{asm.Mov.Imm(asm.R2, 1), asm.FnTracePrintk.Call(), asm.Return()}, true},
		{"bpf_puts", asm.Instructions{asm.Mov.Imm(asm.R1, 0), asm.BuiltinFunc(501).Call(), asm.Return()}, true},
		{"a map update only", asm.Instructions{asm.FnMapUpdateElem.Call(), asm.Mov.Imm(asm.R0, 0), asm.Return()}, false},
		{"the helper's number as a constant, no call", asm.Instructions{asm.Mov.Imm(asm.R0, int32(asm.FnTracePrintk)), asm.Return()}, false},
	} {
		if got := verify.Prints(&ebpf.ProgramSpec{Instructions: tc.ins}); got != tc.want {
			t.Errorf("%s: Prints = %v, want %v", tc.name, got, tc.want)
		}
	}
	for obj, want := range map[string]bool{"trace_bpfel.o": true, "counter_bpfel.o": false, "host_map_bpfel.o": false} {
		spec, err := ebpf.LoadCollectionSpec(filepath.Join("../../../bpf/examples", obj))
		if err != nil {
			t.Fatal(err)
		}
		prints := false
		for _, p := range spec.Programs {
			prints = prints || verify.Prints(p)
		}
		if prints != want {
			t.Errorf("%s: a program prints = %v, want %v", obj, prints, want)
		}
	}
}
