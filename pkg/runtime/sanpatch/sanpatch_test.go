package sanpatch

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/gpubpf/gpubpf/internal/testenv"
	"github.com/gpubpf/gpubpf/pkg/runtime/gpumap"
	"github.com/gpubpf/gpubpf/pkg/runtime/jit"
	"github.com/gpubpf/gpubpf/pkg/runtime/ptx"
)

// compileProg compiles one GPU program of a clang-built object of the
// repository, its maps placed like `gpubpf ptx` does.
func compileProg(t *testing.T, obj, prog string) *jit.Function {
	t.Helper()
	spec, err := ebpf.LoadCollectionSpec(obj)
	if err != nil {
		t.Fatal(err)
	}
	maps := map[string]gpumap.Placement{}
	i := uint64(0)
	for name, ms := range spec.Maps {
		p, err := gpumap.PlacementOf(ms)
		if err != nil {
			continue // a CPU-only map
		}
		i++
		p.Addr = 0x7f0000000000 + i<<28
		maps[name] = p
	}
	ps := spec.Programs[prog]
	if ps == nil {
		t.Fatalf("%s: no program %s", obj, prog)
	}
	printk := gpumap.Placement{Kind: gpumap.RingBuf, Addr: 0x7f0000500000, HostResident: true, MaxEntries: 1 << 16}
	f, err := jit.Compile(ps, jit.Options{Maps: maps, Printk: printk, FuncName: prog})
	if err != nil {
		t.Fatalf("%s %s: %v", obj, prog, err)
	}
	return f
}

const (
	threadhist  = "../../../tools/threadhist/threadhist_bpfel.o"
	kernelTrace = "../../../tools/kernel_trace/kerneltrace_bpfel.o"
	retsnoop    = "../../../tools/kernelretsnoop/kernelretsnoop_bpfel.o"
	launchlate  = "../../../tools/launchlate/launchlate_bpfel.o"
	jitAll      = "../../../bpf/testdata/jit_all.bpf.o"
)

type moduleCase struct {
	name        string
	entry, exit []*jit.Function
	arch        string
	want        []string // substrings the module must have
	not         []string // ... and must not have
}

func moduleCases(t *testing.T) []moduleCase {
	th := compileProg(t, threadhist, "threadhist_exit")
	kt := compileProg(t, kernelTrace, "kernel_trace_entry")
	rs := compileProg(t, retsnoop, "kernelretsnoop_exit")
	ll := compileProg(t, launchlate, "launchlate_entry")
	if !th.UsesEntryTime || !th.UsesKernelIndex || !th.UsesSiteTime || th.UsesCtx {
		t.Fatalf("threadhist_exit no longer uses entry time, kernel index and site time without ctx: the cases below lose their point")
	}
	enter := ".visible .func (.param .b32 gpubpf_res) gpubpf_san_enter(.param .b64 gpubpf_ud, .param .b64 gpubpf_pc)"
	exit := ".visible .func (.param .b32 gpubpf_res) gpubpf_san_exit(.param .b64 gpubpf_ud, .param .b64 gpubpf_pc)"
	nullCheck := "setp.eq.u64 %gpubpf_q, %gpubpf_ud, 0;\n\t@%gpubpf_q bra $gpubpf_done;"
	kidx := "ld.u32 %gpubpf_w0, [%gpubpf_ud];"
	table := ".global .align 16 .b64 gpubpf_san_times[1048576];"
	return []moduleCase{
		{name: "exit with entry time", exit: []*jit.Function{th}, arch: "sm_90",
			want: []string{".version 7.8\n.target sm_90\n.address_size 64\n", table, enter, exit, nullCheck, kidx,
				"mov.u64 %gpubpf_now, %globaltimer;", "st.global.v2.u64 [%gpubpf_a], {%gpubpf_now, %gpubpf_tag};",
				"ld.global.v2.u64 {%gpubpf_t, %gpubpf_u}, [%gpubpf_a];", "selp.b64 %gpubpf_entry, %gpubpf_t, 0, %gpubpf_q;",
				"mov.u64 %r0, %gpubpf_entry;", "mov.u64 %r0, %gpubpf_k;", "mov.u64 %r0, %gpubpf_now;",
				"st.param.b32 [gpubpf_res], 0;\n\tret;"}},
		{name: "entry only", entry: []*jit.Function{kt}, arch: "sm_90",
			want: []string{enter, nullCheck, kidx, "mov.u64 %r0, %gpubpf_k;"},
			not:  []string{exit, "gpubpf_san_times"}},
		{name: "both, no entry time", entry: []*jit.Function{kt, ll}, exit: []*jit.Function{rs}, arch: "sm_90",
			want: []string{enter, exit, "$gpubpf_p0_exit:", "$gpubpf_p1_exit:"},
			not:  []string{"gpubpf_san_times"}},
		{name: "everything, Blackwell", entry: []*jit.Function{kt, ll}, exit: []*jit.Function{rs, th}, arch: "sm_100a",
			want: []string{".version 8.6\n.target sm_100a\n", table, enter, exit}},
		{name: "same program twice is defined once", entry: []*jit.Function{kt}, exit: []*jit.Function{kt}, arch: "sm_90",
			want: []string{enter, exit}},
	}
}

func TestModule(t *testing.T) {
	for _, c := range moduleCases(t) {
		t.Run(c.name, func(t *testing.T) {
			m, err := Module(c.entry, c.exit, c.arch)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range c.want {
				if !strings.Contains(m, w) {
					t.Errorf("module lacks %q", w)
				}
			}
			for _, w := range c.not {
				if strings.Contains(m, w) {
					t.Errorf("module has %q", w)
				}
			}
			if strings.Contains(m, "GPUBPF_") {
				t.Errorf("module has a token left")
			}
			if i := strings.Index(m, ".visible .func (.param .b32 gpubpf_res)"); i < 0 || strings.Contains(m[i:], "[ctx]") {
				t.Errorf("no callback, or a pasted body still loads ctx")
			}
			for _, f := range append(append([]*jit.Function(nil), c.entry...), c.exit...) {
				if n := strings.Count(m, "(.param .b64 ret) "+f.Name+"(.param .b64 ctx)"); n != 1 {
					t.Errorf("%s defined %d times", f.Name, n)
				}
			}
			if t.Failed() {
				t.Log(m)
			}
		})
	}
}

func TestModuleRefuses(t *testing.T) {
	all := compileProg(t, jitAll, "all")
	kt := compileProg(t, kernelTrace, "kernel_trace_entry")
	other := *kt // another program under the same name
	for _, c := range []struct {
		name        string
		entry, exit []*jit.Function
		arch, want  string
	}{
		{"ctx", []*jit.Function{kt}, []*jit.Function{all}, "sm_90", "program all reads the kernel's parameters"},
		{"nothing", nil, nil, "sm_90", "no program"},
		{"arch", []*jit.Function{kt}, nil, "compute_90", "not a GPU architecture"},
		{"same name", []*jit.Function{kt}, []*jit.Function{&other}, "sm_90", "both named kernel_trace_entry"},
		{"nil", []*jit.Function{nil}, nil, "sm_90", "nil program"},
	} {
		if _, err := Module(c.entry, c.exit, c.arch); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one saying %q", c.name, err, c.want)
		}
	}
}

// TestAssemble assembles the modules with the real ptxas, as a tools
// patch (what the sanitizer loads) and once plainly (the PTX itself is
// valid), and finds both callbacks in the cubin.
func TestAssemble(t *testing.T) {
	path := testenv.Ptxas(t)
	r, err := release(path)
	if err != nil {
		t.Fatal(err)
	}
	p := Ptxas{Path: path, Release: r}
	for _, c := range moduleCases(t) {
		t.Run(c.name, func(t *testing.T) {
			arch := c.arch
			m, err := Module(c.entry, c.exit, arch)
			if err != nil {
				t.Fatal(err)
			}
			v, _ := ptx.ParseVersion(versionRe.FindStringSubmatch(m)[1])
			if max, known := p.MaxPTX(); known && ptx.VersionLess(max, v) {
				t.Skipf("%s (CUDA %d.%d) accepts PTX ISA up to %d.%d; %s needs %d.%d", path, r[0], r[1], max[0], max[1], arch, v[0], v[1])
			}
			cubin, err := p.Compile(context.Background(), m, arch)
			if err != nil {
				t.Fatal(err)
			}
			syms := symbols(t, cubin)
			if !syms[EnterFunc] {
				t.Errorf("cubin has no %s", EnterFunc)
			}
			if len(c.exit) > 0 && !syms[ExitFunc] {
				t.Errorf("cubin has no %s", ExitFunc)
			}
			if c.name == "exit with entry time" {
				dir := t.TempDir()
				src := filepath.Join(dir, "m.ptx")
				if err := os.WriteFile(src, []byte(m), 0o644); err != nil {
					t.Fatal(err)
				}
				if out, err := exec.Command(path, "-arch="+arch, "-o", filepath.Join(dir, "m.cubin"), src).CombinedOutput(); err != nil {
					t.Fatalf("plain ptxas: %v\n%s", err, out)
				}
			}
		})
	}
}

func symbols(t *testing.T, cubin []byte) map[string]bool {
	t.Helper()
	// ptxas puts its CUDA version in e_version, which debug/elf refuses
	// unless it is EV_CURRENT.
	cubin = bytes.Clone(cubin)
	if len(cubin) > 24 {
		binary.LittleEndian.PutUint32(cubin[20:], uint32(elf.EV_CURRENT))
	}
	f, err := elf.NewFile(bytes.NewReader(cubin))
	if err != nil {
		t.Fatalf("cubin is not ELF: %v", err)
	}
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]bool{}
	for _, s := range syms {
		m[s.Name] = true
	}
	return m
}

// TestCompileRefusesNewerPTX: PTX above what the ptxas release accepts is
// refused before ptxas runs, saying what to do; a ptxas failure carries
// its stderr and the same advice.
func TestCompileRefusesNewerPTX(t *testing.T) {
	dir := t.TempDir()
	fake := writePtxas(t, dir, "release 11.8", "echo 'ptxas fatal   : Value sm_100 is not defined' >&2; exit 1")
	p := Ptxas{Path: fake, Release: [2]int{11, 8}}
	_, err := p.Compile(context.Background(), ".version 8.6\n.target sm_100\n", "sm_100")
	if err == nil || !strings.Contains(err.Error(), "accepts PTX ISA up to 7.8") || !strings.Contains(err.Error(), "GPUBPF_PTXAS") {
		t.Errorf("newer PTX: %v", err)
	}
	_, err = p.Compile(context.Background(), ".version 7.8\n.target sm_100\n", "sm_100")
	if err == nil || !strings.Contains(err.Error(), "Value sm_100 is not defined") || !strings.Contains(err.Error(), fake) ||
		!strings.Contains(err.Error(), "knows sm_100 and PTX ISA 7.8") {
		t.Errorf("ptxas failure: %v", err)
	}
}

func TestMaxPTX(t *testing.T) {
	for _, c := range []struct {
		rel, isa [2]int
		known    bool
	}{
		{[2]int{11, 8}, [2]int{7, 8}, true}, {[2]int{11, 4}, [2]int{7, 4}, true}, {[2]int{12, 6}, [2]int{8, 5}, true},
		{[2]int{12, 8}, [2]int{8, 7}, true}, {[2]int{12, 7}, [2]int{8, 5}, true}, {[2]int{13, 0}, [2]int{9, 0}, true},
		{[2]int{13, 1}, [2]int{}, false}, {[2]int{10, 2}, [2]int{6, 0}, true},
	} {
		isa, known := Ptxas{Release: c.rel}.MaxPTX()
		if isa != c.isa || known != c.known {
			t.Errorf("CUDA %v: MaxPTX %v %v, want %v %v", c.rel, isa, known, c.isa, c.known)
		}
	}
}

// writePtxas writes a fake ptxas into dir that prints version for
// --version and otherwise runs body.
func writePtxas(t *testing.T, dir, version, body string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "ptxas")
	s := "#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'ptxas: NVIDIA (R) Ptx optimizing assembler'; echo 'Cuda compilation tools, " +
		version + ", V0'; exit 0; fi\n" + body + "\n"
	if err := os.WriteFile(p, []byte(s), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestFindPtxas(t *testing.T) {
	root := t.TempDir()
	dir := func(n string) string { return filepath.Join(root, n) }
	writePtxas(t, dir("env"), "release 13.0", "")
	writePtxas(t, dir("triton"), "release 12.8", "")
	writePtxas(t, dir("cudahome/bin"), "release 12.4", "")
	writePtxas(t, dir("system"), "release 12.6", "")
	writePtxas(t, dir("path"), "release 11.8", "")
	writePtxas(t, dir("broken"), "no release here", "")
	if err := os.MkdirAll(dir("empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name                string
		env, cudaHome, path string
		extra, system       []string
		wantPath, wantErr   string
		wantRel             [2]int
	}{
		{name: "GPUBPF_PTXAS first", env: dir("env/ptxas"), extra: []string{dir("triton")}, cudaHome: dir("cudahome"), system: []string{dir("system")}, path: dir("path"),
			wantPath: dir("env/ptxas"), wantRel: [2]int{13, 0}},
		{name: "extra dirs next", extra: []string{dir("empty"), dir("triton")}, cudaHome: dir("cudahome"), system: []string{dir("system")}, path: dir("path"),
			wantPath: dir("triton/ptxas"), wantRel: [2]int{12, 8}},
		{name: "CUDA_HOME", extra: []string{dir("empty")}, cudaHome: dir("cudahome"), system: []string{dir("system")}, path: dir("path"),
			wantPath: dir("cudahome/bin/ptxas"), wantRel: [2]int{12, 4}},
		{name: "system dirs", system: []string{dir("system")}, path: dir("path"), wantPath: dir("system/ptxas"), wantRel: [2]int{12, 6}},
		{name: "PATH last", path: dir("path"), wantPath: dir("path/ptxas"), wantRel: [2]int{11, 8}},
		{name: "unparsable skipped", extra: []string{dir("broken")}, path: dir("path"), wantPath: dir("path/ptxas"), wantRel: [2]int{11, 8}},
		{name: "unparsable only", extra: []string{dir("broken")}, path: dir("empty"), wantErr: "no CUDA release"},
		{name: "bad GPUBPF_PTXAS is not passed over", env: dir("broken/ptxas"), path: dir("path"), wantErr: "GPUBPF_PTXAS="},
		{name: "missing", extra: []string{dir("empty")}, path: dir("empty"), wantErr: "no ptxas found"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("GPUBPF_PTXAS", c.env)
			t.Setenv("CUDA_HOME", c.cudaHome)
			t.Setenv("PATH", c.path)
			old := systemDirs
			systemDirs = c.system
			defer func() { systemDirs = old }()
			p, err := FindPtxas(c.extra...)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("FindPtxas = %v, %v; want an error saying %q", p, err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.Path != c.wantPath || p.Release != c.wantRel {
				t.Errorf("FindPtxas = %+v, want %s release %v", p, c.wantPath, c.wantRel)
			}
		})
	}
}
