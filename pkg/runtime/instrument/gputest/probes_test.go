package gputest

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/gpubpf/gpubpf/internal/testenv"
	"github.com/gpubpf/gpubpf/pkg/runtime/instrument"
)

// The GPU check's clone (what ptxinst makes) assembles here, so a mistake
// in the counting probes is found before the GPU run.
func TestCounterProbesAssemble(t *testing.T) {
	ptxas := testenv.Ptxas(t)
	src, err := os.ReadFile("../../ptx/testdata/vec_add_cuda118.ptx")
	if err != nil {
		t.Fatal(err)
	}
	entry, exit, mem := CounterProbes(0x7f0000001000, 24)
	r, err := instrument.Instrument(string(src), instrument.Request{Kernels: []string{"vectorAdd"}, Entry: entry, Exit: exit, MemAccess: mem,
		Globals: map[string]uint64{"d_N": 0x7f1200000000, "d_counter": 0x7f1200000100}})
	if err != nil {
		t.Fatal(err)
	}
	// A, B, C and the atomic on d_counter.
	if r.Sites.Mem != 4 {
		t.Errorf("%d memory sites, want 4", r.Sites.Mem)
	}
	// The harness reads the counters as SlotLoads + kind.
	if !regexp.MustCompile(`mul\.wide\.u32\s+%t4, %w2, 8;`).MatchString(r.PTX) || SlotStores != SlotLoads+instrument.MemStore || SlotAtomics != SlotLoads+instrument.MemAtomic {
		t.Errorf("the memory probe does not pick its slot by kind")
	}
	f := filepath.Join(t.TempDir(), "clone.ptx")
	if err := os.WriteFile(f, []byte(r.PTX), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(ptxas, "-arch=sm_80", "-o", f+".cubin", f).CombinedOutput(); err != nil {
		t.Fatalf("ptxas: %v\n%s\n%s", err, out, r.PTX)
	}
}
