package runtime

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/gpubpf/gpubpf/internal/testenv"
	"github.com/gpubpf/gpubpf/pkg/runtime/gpumap"
)

// A probe whose loops' bounds come from data gets the loop budget in its
// code, at the session's budget (Options.LoopBudget, else the default); a
// probe whose loop the verifier bounds does not.
func TestLoopBudgetPrograms(t *testing.T) {
	testenv.Root(t)
	spec, err := ebpf.LoadCollectionSpec("verify/testdata/loops.bpf.o")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		opts Options
		want uint64
	}{{Options{}, DefaultLoopBudget}, {Options{LoopBudget: 1000}, 1000}} {
		tc.opts.Programs = []string{"endless_probe", "bounded_probe"}
		s, err := Open(spec, tc.opts)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		printk := gpumap.Placement{Kind: gpumap.RingBuf, Addr: 0x7f0000000000, HostResident: true, MaxEntries: 1 << 20}
		for _, g := range s.gpu {
			f, err := s.compile(g, placeholderPlacements(spec, g), printk, 1)
			if err != nil {
				t.Fatal(err)
			}
			check := fmt.Sprintf("setp.gt.u64 %%plb, %%lb, %d;", tc.want)
			if has := strings.Contains(f.PTX, check); has != (g.Spec.Name == "endless_probe") {
				t.Errorf("%s (budget %d): the budget check %q present: %v\n%s", g.Spec.Name, tc.want, check, has, f.PTX)
			}
		}
	}
}
