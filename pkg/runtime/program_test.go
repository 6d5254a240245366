package runtime

import (
	"strings"
	"testing"

	"github.com/cilium/ebpf"
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
