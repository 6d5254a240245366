package instrument

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/gpubpf/gpubpf/internal/testenv"
	"github.com/gpubpf/gpubpf/pkg/runtime/fatbin"
	"github.com/gpubpf/gpubpf/pkg/runtime/gpumap"
	"github.com/gpubpf/gpubpf/pkg/runtime/jit"
)

// kernelText assembles PTX for sm_90 and returns the size of kernel's code.
func kernelText(t *testing.T, src, kernel string) uint64 {
	t.Helper()
	dir := t.TempDir()
	in, out := filepath.Join(dir, "m.ptx"), filepath.Join(dir, "m.cubin")
	os.WriteFile(in, []byte(src), 0o644)
	if b, err := exec.Command(testenv.Ptxas(t), "-arch=sm_90", "-O3", in, "-o", out).CombinedOutput(); err != nil {
		t.Fatalf("ptxas: %v\n%s", err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	// ptxas writes its own version into the ELF version fields, which
	// debug/elf refuses; the layout is plain ELF64.
	b[6] = 1
	binary.LittleEndian.PutUint32(b[20:], 1)
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	s := f.Section(".text." + kernel)
	if s == nil {
		t.Fatalf("no .text.%s in the cubin", kernel)
	}
	return s.Size
}

// An empty eBPF program injected at the entry and exits of a real nvcc
// kernel, pasted in through Probe.Inline as the runtime does, leaves the
// kernel's machine code exactly as it was: attaching costs nothing until
// the program does something.
func TestInlinedEmptyProbeAddsNoCode(t *testing.T) {
	raw, err := os.ReadFile("../fatbin/testdata/vec_add_cuda118.fatbin")
	if err != nil {
		t.Fatal(err)
	}
	fbs, err := fatbin.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	const kernel = "_Z9vectorAddPKfS0_Pfi"
	_, src, err := fatbin.PTXFor(fbs, kernel, 90)
	if err != nil {
		t.Fatal(err)
	}
	f, err := jit.Compile(&ebpf.ProgramSpec{Name: "empty", Type: ebpf.Kprobe, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}}, jit.Options{FuncName: "gpubpf_empty"})
	if err != nil {
		t.Fatal(err)
	}
	probe := func(inline bool) *Probe {
		p := &Probe{Func: f.Name, PTX: f.PTX, UsesCtx: f.UsesCtx, PTXVersion: f.PTXVersion}
		if inline {
			p.Inline = func(s Site) string { return f.InlineBody(s.Ctx, "", s.Uniq) }
		}
		return p
	}
	base := kernelText(t, string(src), kernel)
	for _, inline := range []bool{true, false} {
		r, err := Instrument(string(src), Request{Kernels: []string{kernel}, Entry: probe(inline), Exit: probe(inline)})
		if err != nil {
			t.Fatal(err)
		}
		got := kernelText(t, r.PTX, kernel)
		t.Logf("vectorAdd .text: %d bytes uninstrumented, %d with an empty entry+exit probe (inline=%v)", base, got, inline)
		if inline && got != base {
			t.Fatalf("inlined empty probe changed the kernel's code: %d -> %d bytes", base, got)
		}
		if !inline && got == base {
			t.Fatalf("a called probe cost nothing: the test cannot tell inlining from calling")
		}
	}
}

// A real program with a map lookup, helpers and a per-thread array, pasted
// into the real kernel at entry and exits, assembles (what the runtime
// loads, minus the real map addresses).
func TestInlinedCounterProbeAssembles(t *testing.T) {
	raw, err := os.ReadFile("../fatbin/testdata/vec_add_cuda118.fatbin")
	if err != nil {
		t.Fatal(err)
	}
	fbs, err := fatbin.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	const kernel = "_Z9vectorAddPKfS0_Pfi"
	_, src, err := fatbin.PTXFor(fbs, kernel, 90)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := ebpf.LoadCollectionSpec("../../../bpf/bench/probe_counter.bpf.o")
	if err != nil {
		t.Fatal(err)
	}
	m := spec.Maps["counters"]
	f, err := jit.Compile(spec.Programs["probe_counter"], jit.Options{FuncName: "gpubpf_counter",
		Maps:   map[string]gpumap.Placement{"counters": {Kind: gpumap.PerThreadArray, Addr: 0x7f0000000000, KeySize: m.KeySize, ValueSize: m.ValueSize, MaxEntries: m.MaxEntries, Threads: 1 << 16}},
		Printk: gpumap.Placement{Kind: gpumap.RingBuf, Addr: 0x7e0000000000, HostResident: true, MaxEntries: 1 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	p := &Probe{Func: f.Name, PTX: f.PTX, UsesCtx: f.UsesCtx, PTXVersion: f.PTXVersion,
		Inline: func(s Site) string { return f.InlineBody(s.Ctx, "", s.Uniq) }}
	r, err := Instrument(string(src), Request{Kernels: []string{kernel}, Entry: p, Exit: p})
	if err != nil {
		t.Fatal(err)
	}
	base, got := kernelText(t, string(src), kernel), kernelText(t, r.PTX, kernel)
	t.Logf("vectorAdd .text: %d bytes, %d with the counter probe inlined at entry and exit", base, got)
	if got <= base {
		t.Fatalf("the counter probe added no code (%d -> %d): was it injected?", base, got)
	}
}

// bpf/mem_trace.bpf.c, compiled by the JIT and pasted at every global
// access of samples/vec_add.cu's kernel (nvcc's PTX, the loop unrolled:
// 10 loads, 5 stores, the atomicAdd on d_calls) and of the atomics
// fixture (a device function two kernels call: kernel index unknown
// there), assembles as the runtime would load it. Its ctx is the 16-byte
// record: no zero-filled buffer beyond it.
func TestInlinedMemTraceAssembles(t *testing.T) {
	spec, err := ebpf.LoadCollectionSpec("../../../bpf/examples/mem_trace_bpfel.o")
	if err != nil {
		t.Fatal(err)
	}
	maps := map[string]gpumap.Placement{}
	for i, name := range []string{"accesses", "sizes"} {
		m := spec.Maps[name]
		kind, err := gpumap.KindOf(m)
		if err != nil || kind != gpumap.Hash {
			t.Fatalf("map %s: kind %v, %v; want a GPU hash", name, kind, err)
		}
		maps[name] = gpumap.Placement{Kind: kind, Addr: 0x7f0000000000 + uint64(i)<<32, KeySize: m.KeySize, ValueSize: m.ValueSize, MaxEntries: m.MaxEntries}
	}
	f, err := jit.Compile(spec.Programs["mem_trace"], jit.Options{FuncName: "gpubpf_mem_trace", Maps: maps,
		Printk: gpumap.Placement{Kind: gpumap.RingBuf, Addr: 0x7e0000000000, HostResident: true, MaxEntries: 1 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	if !f.UsesCtx || f.CtxBytes != 16 || !f.UsesKernelIndex {
		t.Fatalf("mem_trace: UsesCtx %v CtxBytes %d UsesKernelIndex %v, want true 16 true", f.UsesCtx, f.CtxBytes, f.UsesKernelIndex)
	}
	for _, c := range []struct {
		fixture string
		globals map[string]uint64
		sites   int
		unknown bool // a site in a .func several kernels call
	}{
		{"testdata/vec_add_sample_cuda118.ptx", map[string]uint64{"d_N": 0x7f1200000000, "d_scale": 0x7f1200000004, "d_calls": 0x7f1200000008}, 16, false},
		{"testdata/atomics_cuda118.ptx", map[string]uint64{"d_total": 0x7f1200000000}, 27, true},
	} {
		t.Run(filepath.Base(c.fixture), func(t *testing.T) {
			kernels := map[string]uint32{}
			unknown := false
			p := &Probe{Func: f.Name, PTX: f.PTX, UsesCtx: f.UsesCtx, CtxBytes: f.CtxBytes, PTXVersion: f.PTXVersion,
				Inline: func(s Site) string {
					k := uint32(jit.UnknownKernel)
					if s.Kernel != "" {
						if _, ok := kernels[s.Kernel]; !ok {
							kernels[s.Kernel] = uint32(len(kernels))
						}
						k = kernels[s.Kernel]
					} else {
						unknown = true
					}
					return f.InlineAt(jit.Site{Ctx: s.Ctx, Uniq: s.Uniq, Kernel: k})
				}}
			r, err := Instrument(read(t, c.fixture), Request{MemAccess: p, Globals: c.globals})
			if err != nil {
				t.Fatal(err)
			}
			if r.Sites.Mem != c.sites || unknown != c.unknown {
				t.Errorf("%d memory sites (want %d), a site of unknown kernel %v (want %v)", r.Sites.Mem, c.sites, unknown, c.unknown)
			}
			if strings.Contains(r.PTX, memVar+"[4096]") || !strings.Contains(r.PTX, memVar+"[16]") {
				t.Errorf("the record buffer is not 16 bytes")
			}
			assemble(t, r.PTX, "sm_80")
		})
	}
}

// launchlate's entry probe pasted into samples/vec_add.cu's kernel: every
// warp outside the blocks with ctaid.x = 0 leaves the first-thread test
// after one read of ctaid.x and a branch, with no S2R of the other index
// registers and no convergence barrier (that work cost vec_add's largest
// preset 8% on an H100; docs/gpu-results.md). ptxas merges the two tests
// into one predicate unless the probe keeps them apart, which this checks
// in the SASS itself.
func TestFirstThreadTestSASS(t *testing.T) {
	spec, err := ebpf.LoadCollectionSpec("../../../tools/launchlate/launchlate_bpfel.o")
	if err != nil {
		t.Fatal(err)
	}
	maps := map[string]gpumap.Placement{}
	addr := uint64(0x7f0000000000)
	for name, m := range spec.Maps {
		p, err := gpumap.PlacementOf(m)
		if err != nil {
			continue // the uprobes' own maps
		}
		p.Addr, addr = addr, addr+1<<32
		maps[name] = p
	}
	f, err := jit.Compile(spec.Programs["launchlate_entry"], jit.Options{FuncName: "gpubpf_launchlate_entry", Maps: maps})
	if err != nil {
		t.Fatal(err)
	}
	p := &Probe{Func: f.Name, PTX: f.PTX, UsesCtx: f.UsesCtx, PTXVersion: f.PTXVersion,
		Inline: func(s Site) string { return f.InlineBody(s.Ctx, "", s.Uniq) }}
	r, err := Instrument(read(t, "testdata/vec_add_sample_cuda118.ptx"), Request{Kernels: []string{"_Z9vectorAddPKfS0_Pfi"}, Entry: p,
		Globals: map[string]uint64{"d_N": 0x7f1200000000, "d_scale": 0x7f1200000004, "d_calls": 0x7f1200000008}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	in, cubin := filepath.Join(dir, "m.ptx"), filepath.Join(dir, "m.cubin")
	if err := os.WriteFile(in, []byte(r.PTX), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command(testenv.Ptxas(t), "-arch=sm_90", "-O3", in, "-o", cubin).CombinedOutput(); err != nil {
		t.Fatalf("ptxas: %v\n%s", err, b)
	}
	b, err := exec.Command(testenv.Tool(t, "cuobjdump"), "-sass", cubin).CombinedOutput()
	if err != nil {
		t.Fatalf("cuobjdump: %v\n%s", err, b)
	}
	sass := string(b)
	bra := strings.Index(sass, " BRA ")
	if bra < 0 {
		t.Fatalf("no branch in the instrumented kernel:\n%s", sass)
	}
	before := sass[:bra]
	if !strings.Contains(before, "SR_CTAID.X") {
		t.Errorf("the first branch does not follow a read of ctaid.x:\n%s", before)
	}
	for _, bad := range []string{"SR_TID.Y", "SR_TID.Z", "SR_CTAID.Y", "SR_CTAID.Z", "BSSY", "WARPSYNC"} {
		if strings.Contains(before, bad) {
			t.Errorf("every warp runs %s before the first-thread test's first branch:\n%s", bad, before)
		}
	}
	if !strings.Contains(sass[bra:], "SR_CTAID.Y") || !strings.Contains(sass[bra:], "SR_TID.Z") {
		t.Errorf("the rest of the first-thread test is missing after the first branch:\n%s", sass)
	}
}
