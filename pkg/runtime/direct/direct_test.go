package direct

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/gpubpf/gpubpf/internal/testenv"
	"github.com/gpubpf/gpubpf/pkg/runtime/gpumap"
	"github.com/gpubpf/gpubpf/pkg/runtime/jit"
)

// compileAll compiles every program of a committed object against made-up
// map addresses, as gpubpf ptx does.
func compileAll(t *testing.T, obj string) []Program {
	t.Helper()
	spec, err := ebpf.LoadCollectionSpec(obj)
	if err != nil {
		t.Fatal(err)
	}
	maps := map[string]gpumap.Placement{}
	addr := uint64(0x7f0000000000)
	for name, ms := range spec.Maps {
		kind, err := gpumap.KindOf(ms)
		if err != nil {
			continue
		}
		maps[name] = gpumap.Placement{Kind: kind, Addr: addr, KeySize: ms.KeySize, ValueSize: ms.ValueSize, MaxEntries: ms.MaxEntries,
			HostResident: kind == gpumap.HostArray || kind == gpumap.RingBuf}
		addr += 1 << 28
	}
	printk := gpumap.Placement{Kind: gpumap.RingBuf, Addr: 0x7e0000000000, MaxEntries: 1 << 20}
	names := make([]string, 0, len(spec.Programs))
	for n := range spec.Programs {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []Program
	for _, n := range names {
		f, err := jit.Compile(spec.Programs[n], jit.Options{Maps: maps, Printk: printk, FuncName: "gpubpf_" + n})
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		out = append(out, Program{Name: n, Func: f})
	}
	return out
}

func assemble(t *testing.T, m *Module) {
	t.Helper()
	ptxas := testenv.Ptxas(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "direct.ptx")
	if err := os.WriteFile(src, []byte(m.PTX), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(ptxas, "-arch="+m.SM, src, "-o", filepath.Join(dir, "direct.cubin")).CombinedOutput()
	if err != nil {
		var b strings.Builder
		for i, l := range strings.Split(m.PTX, "\n") {
			fmt.Fprintf(&b, "%4d %s\n", i+1, l)
		}
		t.Fatalf("ptxas -arch=%s: %v\n%s\n--- module ---\n%s", m.SM, err, out, b.String())
	}
}

// Every program of the example, and of the compiler's all-features object
// (its ctx reads, subprogram, rings and printk included), makes kernels
// ptxas accepts, for the oldest architecture they run on and for the H100.
func TestBuildAssembles(t *testing.T) {
	for _, obj := range []string{"../../../bpf/examples/direct_run_bpfel.o", "../../../bpf/testdata/jit_all.bpf.o"} {
		progs := compileAll(t, obj)
		for _, tgt := range []Target{{}, {Major: 9, Minor: 0, MaxPTX: [2]int{9, 0}}} {
			m, err := Build(progs, tgt)
			if err != nil {
				t.Fatalf("%s: %v", obj, err)
			}
			if len(m.Entries) != len(progs) {
				t.Fatalf("%d entries for %d programs", len(m.Entries), len(progs))
			}
			for i, e := range m.Entries {
				if e != EntryName(progs[i].Name) || !strings.Contains(m.PTX, ".visible .entry "+e+"()") {
					t.Errorf("entry %d is %s, not the kernel of %s", i, e, progs[i].Name)
				}
			}
			assemble(t, m)
		}
	}
}

// A program that reads ctx gets a buffer of zeros as long as it reads, in
// each thread; one that does not gets a NULL ctx and no buffer.
func TestEntryCtx(t *testing.T) {
	progs := compileAll(t, "../../../bpf/testdata/jit_all.bpf.o")
	for _, p := range progs {
		text := entry("k", p.Func)
		has := strings.Contains(text, ".local .align 16 .b8 "+ctxVar)
		if want := p.Func.UsesCtx && p.Func.CtxBytes > 0; has != want {
			t.Errorf("%s (ctx %v, %d bytes): ctx buffer %v\n%s", p.Name, p.Func.UsesCtx, p.Func.CtxBytes, has, text)
		}
	}
	var sawLoop, sawStores bool
	for _, n := range []int{8, 128, 4096} {
		z := zero(n)
		sawLoop = sawLoop || strings.Contains(z, "bra $gpubpf_zero")
		sawStores = sawStores || strings.Count(z, "st.local.b64") == n/8
	}
	if !sawLoop || !sawStores {
		t.Error("zero fills: want stores for short buffers and a loop for long ones")
	}
}

func TestTarget(t *testing.T) {
	f := &jit.Function{Name: "gpubpf_p", PTX: ".func (.param .b64 ret) gpubpf_p(.param .b64 ctx)\n{\n\tst.param.b64 [ret], 0;\n\tret;\n}\n", PTXVersion: [2]int{7, 8}}
	for _, tc := range []struct {
		tgt  Target
		sm   string
		ver  [2]int
		fail string
	}{
		{Target{}, "sm_70", [2]int{7, 8}, ""},
		{Target{Major: 9}, "sm_90", [2]int{7, 8}, ""},
		{Target{Major: 8, Minor: 9}, "sm_89", [2]int{7, 8}, ""},
		{Target{Major: 10}, "sm_100", [2]int{8, 6}, ""},
		{Target{Major: 12, Minor: 0, MaxPTX: [2]int{8, 8}}, "sm_120", [2]int{8, 7}, ""},
		{Target{Major: 13}, "sm_121", [2]int{8, 8}, ""}, // newer than the table: the newest target JITs forward
		{Target{Major: 9, Minor: 5}, "sm_90", [2]int{7, 8}, ""},
		{Target{Major: 6, Minor: 1}, "", [2]int{}, "gpubpf's GPU programs need sm_70 (Volta) or newer"},
		{Target{Major: 9, MaxPTX: [2]int{7, 5}}, "", [2]int{}, "the driver accepts at most 7.5: update the NVIDIA driver"},
	} {
		m, err := Build([]Program{{Name: "p", Func: f}}, tc.tgt)
		if tc.fail != "" {
			if err == nil || !strings.Contains(err.Error(), tc.fail) {
				t.Errorf("%+v: error %v, want %q", tc.tgt, err, tc.fail)
			}
			continue
		}
		if err != nil || m.SM != tc.sm || m.Version != tc.ver {
			t.Errorf("%+v: %v %v %v, want %s %v", tc.tgt, m.SM, m.Version, err, tc.sm, tc.ver)
		}
	}
	if _, err := Build([]Program{{Name: "a.b", Func: f}, {Name: "a_b", Func: f}}, Target{}); err == nil || !strings.Contains(err.Error(), "rename one") {
		t.Errorf("two programs with one kernel name: %v", err)
	}
	if EntryName("vec.add") != "gpubpf_direct_vec_add" {
		t.Errorf("EntryName(vec.add) = %s", EntryName("vec.add"))
	}
}
