package runtime

import (
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

func TestSplitPrograms(t *testing.T) {
	spec := &ebpf.CollectionSpec{Programs: map[string]*ebpf.ProgramSpec{
		"a": {Name: "a", SectionName: "kprobe/_Z9vectorAddPKfS0_Pfi"},
		"b": {Name: "b", SectionName: "kretprobe/cuda__Z9vectorAddPKfS0_Pf"},
		"c": {Name: "c", SectionName: "gpu/entry/vectorAdd"},
		"d": {Name: "d", SectionName: "gpu/exit/*Add*"},
		"e": {Name: "e", SectionName: "uprobe/./app:cudaLaunchKernel"},
		"f": {Name: "f", SectionName: "uretprobe"},
		"g": {Name: "g", SectionName: "uprobe//usr/lib/libcudart.so.13:cudaMalloc"},
		"h": {Name: "h", SectionName: "kprobe/__memcapture"},
		"i": {Name: "i", SectionName: "kprobe/cuda___memcapture"},
		"j": {Name: "j", SectionName: "gpu/mem/vectorAdd"},
		"k": {Name: "k", SectionName: "gpu/mem/_Z9vectorAdd*"},
		"l": {Name: "l", SectionName: "gpu/entry/__memcapture"}, // gpubpf's spelling names a kernel
	}}
	gpu, cpu, err := SplitPrograms(spec)
	if err != nil {
		t.Fatal(err)
	}
	wantGPU := map[string]struct {
		site   ProbeSite
		kernel string
	}{
		"a": {SiteEntry, "_Z9vectorAddPKfS0_Pfi"},
		"b": {SiteExit, "_Z9vectorAddPKfS0_Pf"},
		"c": {SiteEntry, "vectorAdd"},
		"d": {SiteExit, "*Add*"},
		"h": {SiteMem, "*"},
		"i": {SiteMem, "*"},
		"j": {SiteMem, "vectorAdd"},
		"k": {SiteMem, "_Z9vectorAdd*"},
		"l": {SiteEntry, "__memcapture"},
	}
	if len(gpu) != len(wantGPU) {
		t.Fatalf("got %d GPU programs, want %d", len(gpu), len(wantGPU))
	}
	for _, g := range gpu {
		w := wantGPU[g.Spec.Name]
		if g.Site != w.site || g.Kernel != w.kernel {
			t.Errorf("%s: site %v kernel %q, want %v %q", g.Spec.Name, g.Site, g.Kernel, w.site, w.kernel)
		}
	}
	wantCPU := map[string]CPUProgram{
		"e": {Path: "./app", Symbol: "cudaLaunchKernel"},
		"f": {Return: true},
		"g": {Path: "/usr/lib/libcudart.so.13", Symbol: "cudaMalloc"},
	}
	for _, c := range cpu {
		w := wantCPU[c.Spec.Name]
		if c.Return != w.Return || c.Path != w.Path || c.Symbol != w.Symbol {
			t.Errorf("%s: %+v, want %+v", c.Spec.Name, c, w)
		}
	}
}

func TestSplitProgramsRefuses(t *testing.T) {
	for sec, want := range map[string]string{
		"xdp":                         "neither a GPU probe",
		"kprobe/":                     "names no CUDA kernel",
		"uprobe/nocolon":              `names no PATH:SYMBOL: write it as SEC("uprobe/PATH:SYMBOL")`,
		"uretprobe/path:":             `or as a bare SEC("uretprobe") with --attach`,
		"tracepoint/sched":            "neither a GPU probe",
		"socket":                      "kprobe/__memcapture or gpu/mem/KERNEL at every global memory access",
		"gpu/mem/":                    `SEC("gpu/mem/*") or SEC("kprobe/__memcapture"): every kernel`,
		"gpu/memory/k":                "neither a GPU probe",
		"kretprobe/__memcapture":      `has no return to run at; put it in SEC("kprobe/__memcapture")`,
		"kretprobe/cuda___memcapture": "has no return to run at",
	} {
		spec := &ebpf.CollectionSpec{Programs: map[string]*ebpf.ProgramSpec{"p": {Name: "p", SectionName: sec}}}
		_, _, err := SplitPrograms(spec)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("section %q: error %v, want one containing %q", sec, err, want)
		}
	}
}

func TestProbeSiteWhere(t *testing.T) {
	for _, c := range []struct {
		site   ProbeSite
		kernel string
		want   string
	}{
		{SiteEntry, "vectorAdd", "at the entry of vectorAdd"},
		{SiteExit, "vectorAdd", "at every exit of vectorAdd"},
		{SiteMem, "*", "at every global load/store/atomic of every kernel"},
		{SiteMem, "vectorAdd, scale", "at every global load/store/atomic of vectorAdd, scale"},
	} {
		if got := c.site.Where(c.kernel); got != c.want {
			t.Errorf("%v.Where(%q) = %q, want %q", c.site, c.kernel, got, c.want)
		}
	}
}

// TestWithVariables: a const volatile knob a tool sets through Variables
// reaches the data section the GPU side places; the caller's spec is kept.
func TestWithVariables(t *testing.T) {
	spec := &ebpf.CollectionSpec{
		Maps: map[string]*ebpf.MapSpec{".rodata": {Name: ".rodata", Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1,
			Contents: []ebpf.MapKV{{Key: uint32(0), Value: []byte{1, 2, 3, 4, 5, 6, 7, 8}}}}},
		Variables: map[string]*ebpf.VariableSpec{"knob": {Name: "knob", SectionName: ".rodata", Offset: 4, Value: []byte{0, 0, 0, 0}}},
	}
	if err := spec.Variables["knob"].Set(uint32(0x11223344)); err != nil {
		t.Fatal(err)
	}
	out, err := withVariables(spec)
	if err != nil {
		t.Fatal(err)
	}
	got := out.Maps[".rodata"].Contents[0].Value.([]byte)
	if want := []byte{1, 2, 3, 4, 0x44, 0x33, 0x22, 0x11}; string(got) != string(want) {
		t.Fatalf("section %x, want %x", got, want)
	}
	if orig := spec.Maps[".rodata"].Contents[0].Value.([]byte); orig[4] != 5 {
		t.Fatal("the caller's spec was changed")
	}
	spec.Variables["knob"].Offset = 6
	if _, err := withVariables(spec); err == nil {
		t.Fatal("a variable outside its section was accepted")
	}
}

// TestReadOnlyData: only read-only global data (BPF_F_RDONLY_PROG, one
// value) is handed to the compiler to fold; .data may change at run time.
func TestReadOnlyData(t *testing.T) {
	val := []byte{1, 2, 3, 4}
	arr := func(name string, flags uint32) *ebpf.MapSpec {
		return &ebpf.MapSpec{Name: name, Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1, Flags: flags,
			Contents: []ebpf.MapKV{{Key: uint32(0), Value: val}}}
	}
	spec := &ebpf.CollectionSpec{Maps: map[string]*ebpf.MapSpec{
		".rodata":    arr(".rodata", unix.BPF_F_RDONLY_PROG),
		".data":      arr(".data", 0),
		".rodata.hm": {Name: ".rodata.hm", Type: ebpf.Hash, KeySize: 4, ValueSize: 4, MaxEntries: 1, Flags: unix.BPF_F_RDONLY_PROG},
	}}
	got := ReadOnlyData(spec)
	if len(got) != 1 || string(got[".rodata"]) != string(val) {
		t.Fatalf("ReadOnlyData = %v, want only .rodata", got)
	}
}

func TestPidList(t *testing.T) {
	for _, c := range []struct {
		pids []int
		want string
	}{{[]int{12}, "process 12"}, {[]int{12, 13}, "processes 12, 13"}} {
		if got := pidList(c.pids); got != c.want {
			t.Errorf("pidList(%v) = %q, want %q", c.pids, got, c.want)
		}
	}
}

// Direct programs: bpftime's section and gpubpf's own are kernels of their
// own, never probes on a kernel named __directly_run.
func TestSplitProgramsDirect(t *testing.T) {
	for _, tc := range []struct {
		sec    string
		site   ProbeSite
		kernel string
		fails  string
	}{
		{"kprobe/__directly_run", SiteDirect, "", ""},
		{"gpu/direct", SiteDirect, "", ""},
		{"kprobe/__directly_run_not", SiteEntry, "__directly_run_not", ""},
		{"kprobe/cuda___directly_run", SiteEntry, "__directly_run", ""},
		{"kretprobe/__directly_run", SiteExit, "__directly_run", ""},
		{"gpu/entry/__directly_run", SiteEntry, "__directly_run", ""},
		{"gpu/direct/vec_add", 0, "", "a direct GPU program (gpu/direct, kprobe/__directly_run)"},
		{"gpu/directly", 0, "", "neither a GPU probe"},
	} {
		spec := &ebpf.CollectionSpec{Programs: map[string]*ebpf.ProgramSpec{"p": {Name: "p", SectionName: tc.sec}}}
		gpu, _, err := SplitPrograms(spec)
		if tc.fails != "" {
			if err == nil || !strings.Contains(err.Error(), tc.fails) {
				t.Errorf("section %q: error %v, want one saying %q", tc.sec, err, tc.fails)
			}
			continue
		}
		if err != nil || len(gpu) != 1 || gpu[0].Site != tc.site || gpu[0].Kernel != tc.kernel || gpu[0].Direct() != (tc.site == SiteDirect) {
			t.Errorf("section %q: %+v %v, want site %v kernel %q", tc.sec, gpu, err, tc.site, tc.kernel)
		}
	}
	if SiteDirect.String() != "direct" {
		t.Errorf("SiteDirect is %q", SiteDirect)
	}
}

// What a session runs of an object with direct programs, with and without
// --direct.
func TestPickDirect(t *testing.T) {
	prog := func(name, sec string) *ebpf.ProgramSpec { return &ebpf.ProgramSpec{Name: name, SectionName: sec} }
	mixed := map[string]*ebpf.ProgramSpec{
		"vec_add": prog("vec_add", "kprobe/__directly_run"),
		"hello":   prog("hello", "gpu/direct"),
		"probe":   prog("probe", "kprobe/_Z6vecAddPfi"),
		"up":      prog("up", "uprobe/libcudart.so:cudaMalloc"),
	}
	direct := map[string]*ebpf.ProgramSpec{"vec_add": mixed["vec_add"], "hello": mixed["hello"]}
	probes := map[string]*ebpf.ProgramSpec{"probe": mixed["probe"]}
	for _, tc := range []struct {
		name  string
		progs map[string]*ebpf.ProgramSpec
		opts  Options
		gpu   string // program names kept, in order
		cpu   int
		note  string
		fails string
	}{
		{name: "normal run, probes and direct", progs: mixed, gpu: "probe", cpu: 1,
			note: "note: direct program(s) hello, vec_add left out: they run only with --direct"},
		{name: "normal run, direct only", progs: direct,
			fails: "its programs (hello, vec_add) are all direct GPU programs (section gpu/direct or kprobe/__directly_run), kernels of their own that run with no application: run them with gpubpf run --direct"},
		{name: "normal run, no direct", progs: probes, gpu: "probe"},
		{name: "--direct, mixed", progs: mixed, opts: Options{Direct: true}, gpu: "hello,vec_add",
			note: "note: 2 probe(s) left out (probe, up): --direct runs only the direct programs"},
		{name: "--direct in --program order", progs: direct, opts: Options{Direct: true, Programs: []string{"vec_add", "hello"}}, gpu: "vec_add,hello"},
		{name: "--direct, no direct programs", progs: probes, opts: Options{Direct: true},
			fails: `--direct runs programs in SEC("gpu/direct") or SEC("kprobe/__directly_run") sections, and the object has none (its programs: probe)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var note strings.Builder
			tc.opts.Warn = &note
			gpu, cpu, err := SplitPrograms(&ebpf.CollectionSpec{Programs: tc.progs})
			if err != nil {
				t.Fatal(err)
			}
			gpu, cpu, err = pickDirect(gpu, cpu, tc.opts)
			if tc.fails != "" {
				if err == nil || !strings.Contains(err.Error(), tc.fails) {
					t.Fatalf("error %v, want %q", err, tc.fails)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(programNames(gpu), ","); got != tc.gpu || len(cpu) != tc.cpu {
				t.Errorf("kept GPU %s and %d CPU programs, want %s and %d", got, len(cpu), tc.gpu, tc.cpu)
			}
			if got := strings.TrimSpace(note.String()); got != tc.note {
				t.Errorf("note %q, want %q", got, tc.note)
			}
		})
	}
}
