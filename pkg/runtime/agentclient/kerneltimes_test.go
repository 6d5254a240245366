package agentclient

import (
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"testing"

	"github.com/gpubpf/gpubpf/internal/testenv"
	"github.com/gpubpf/gpubpf/pkg/runtime/agentproto"
)

// Kernel times need CUPTI in the process; where it cannot be had, the
// start says why in words a user can act on, and reads are refused until
// a start succeeds. (CUPTI itself runs on the GPU machine:
// scripts/gpu/cupti-check.sh.)
func TestKernelTimesRefused(t *testing.T) {
	f := build(t)
	tests := []struct {
		name string
		env  []string
		want string
	}{
		{"switched off", []string{"GPUBPF_CUPTI=off"}, "CUPTI is off in this process (GPUBPF_CUPTI=off)"},
		{"named library missing", []string{"GPUBPF_CUPTI=/nonexistent/libcupti.so.13"}, "GPUBPF_CUPTI=/nonexistent/libcupti.so.13: "},
		{"not a CUPTI", []string{"GPUBPF_CUPTI=" + f.agent}, "lacks the CUPTI calls"},
		{"a tool injected", []string{"CUDA_INJECTION64_PATH=/opt/nsight/libToolsInjection64.so"}, "CUPTI belongs to a tool injected into this process (CUDA_INJECTION64_PATH=/opt/nsight/libToolsInjection64.so)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, c := f.startDialed(t, tc.env...)
			defer c.Close()
			if got := a.launch("launch"); got != "_Z6vecAddPfi" {
				t.Fatalf("launch ran %q", got)
			}
			if _, err := c.KernelTimes(false); err == nil || !strings.Contains(err.Error(), "not started") {
				t.Errorf("read before a start: %v, want refused as not started", err)
			}
			lib, _, err := c.KernelTimesStart()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("start: lib %q, error %v; want an error saying %q", lib, err, tc.want)
			}
			// the program runs on
			if got := a.launch("launch"); got != "_Z6vecAddPfi" {
				t.Fatalf("launch after the refusal ran %q", got)
			}
		})
	}
}

// fakeCUPTI builds the stand-in libcupti (agent/testdata/fakecupti.c): the
// stand-in driver reports each launch to it as the real driver does to
// CUPTI.
func fakeCUPTI(t *testing.T, f fixture) string {
	t.Helper()
	_, self, _, _ := goruntime.Caller(0)
	src := filepath.Join(filepath.Dir(self), "..", "agent", "testdata", "fakecupti.c")
	lib := filepath.Join(f.dir, "libfakecupti.so")
	if out, err := exec.Command(testenv.Tool(t, "gcc"), "-O1", "-fPIC", "-shared", "-pthread", "-o", lib, src).CombinedOutput(); err != nil {
		t.Fatalf("building the stand-in CUPTI: %v\n%s", err, out)
	}
	return lib
}

// Through a stand-in CUPTI: each launch after the start comes back once as
// a kernel record with its launch call's CPU time (before its GPU start),
// its name (sent once), the primary context as 0; the agent's own kernels
// stay out; a stop finalizes CUPTI at the next launch's callback, and a
// new start works again. So with each way of stamping launches: CUPTI's
// launch callback (the default, or where CUPTI refuses per-call API records
// or external correlation), CUPTI's API records of the launch calls alone,
// the agent's wrappers joined through external correlation records. A
// CUPTI another subscriber holds is refused.
func TestKernelTimesStandIn(t *testing.T) {
	f := build(t)
	lib := fakeCUPTI(t, f)
	for _, tc := range []struct {
		name, env, join, enable, disable string
		flags                            uint32 // the records': the stream unknown with API records
	}{
		{"CUPTI's callback (the default)", "", "by CUPTI's callback", "enable\n", "disable\nfinalize\n", 0},
		{"GPUBPF_CUPTI_JOIN=api", "GPUBPF_CUPTI_JOIN=api", "by CUPTI's API records of the launch calls", "enable\nenable driver\nenable correlation\n", "disable\ndisable driver\ndisable correlation\nfinalize\n", agentproto.KernelTimeStreamUnknown},
		{"GPUBPF_CUPTI_JOIN=external", "GPUBPF_CUPTI_JOIN=external", "by the agent (external correlation)", "enable\nenable correlation\n", "disable\ndisable correlation\nfinalize\n", 0},
		{"GPUBPF_CUPTI_JOIN=callback", "GPUBPF_CUPTI_JOIN=callback", "by CUPTI's callback", "enable\n", "disable\nfinalize\n", 0},
		{"no per-call API records", "GPUBPF_CUPTI_JOIN=api FAKECUPTI_NOAPI=1", "by CUPTI's callback", "enable\nenable driver\ndisable driver\n", "disable\nfinalize\n", 0},
		{"no external correlation", "GPUBPF_CUPTI_JOIN=api FAKECUPTI_NOEXT=1", "by CUPTI's callback", "enable\nenable driver\ndisable driver\n", "disable\nfinalize\n", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log := filepath.Join(t.TempDir(), "cupti.log")
			env := []string{"GPUBPF_CUPTI=" + lib, "FAKECUPTI_LOG=" + log}
			env = append(env, strings.Fields(tc.env)...)
			a, c := f.startDialed(t, env...)
			a.launch("launch") // before the start: no record
			got, ver, err := c.KernelTimesStart()
			if err != nil || got != lib || ver != 130001 {
				t.Fatalf("start: %q %d %v, want %s, 130001", got, ver, err, lib)
			}
			if b, _ := os.ReadFile(log); !strings.HasSuffix(string(b), tc.enable) {
				t.Errorf("CUPTI's calls at the start:\n%s\nwant them to end in %q", b, tc.enable)
			}
			if _, err := c.Clock(OnDevice(0), 2); err != nil { // the agent's own kernel
				t.Fatal(err)
			}
			before := agentproto.MonoNow()
			for _, cmd := range []string{"launch", "launchp", "launch"} {
				if k := a.launch(cmd); k != "_Z6vecAddPfi" {
					t.Fatalf("%s ran %s", cmd, k)
				}
			}
			after := agentproto.MonoNow()
			rep, err := c.KernelTimes(false)
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Records) != 3 || len(rep.Names) != 1 || rep.Names[0].Name != "_Z6vecAddPfi" {
				t.Fatalf("3 launches gave %d records, names %v: %+v", len(rep.Records), rep.Names, rep.Records)
			}
			grids := map[uint64]bool{}
			for _, r := range rep.Records {
				if r.CPU < before || r.CPU > after || r.Start <= r.CPU || r.End <= r.Start || r.Name != rep.Names[0].ID || r.Ctx != 0 || r.Device != 0 || r.Flags != tc.flags {
					t.Errorf("record %+v: want the call's time within [%d, %d] before start and end, the name's id, ctx 0, flags %d", r, before, after, tc.flags)
				}
				grids[r.Grid] = true
			}
			if len(grids) != 3 {
				t.Errorf("grid ids %v: want three", grids)
			}
			if !strings.Contains(rep.Library, "4 kernel records") || !strings.HasSuffix(rep.Library, "launches stamped "+tc.join) {
				t.Errorf("the read's account %q: want the agent's kernel among 4 records, launches stamped %s", rep.Library, tc.join)
			}
			a.launch("launch")
			rep, err = c.KernelTimes(true)
			if err != nil || len(rep.Records) != 1 || len(rep.Names) != 0 || rep.Records[0].CPU == 0 {
				t.Fatalf("second read: %+v %v: want one stamped record, no name sent again", rep, err)
			}
			if err := c.KernelTimesStop(); err != nil {
				t.Fatal(err)
			}
			a.launch("launch") // its callback's exit finalizes CUPTI
			if b, _ := os.ReadFile(log); !strings.HasSuffix(string(b), tc.disable) {
				t.Errorf("CUPTI's calls after the stop:\n%s\nwant them to end in %q", b, tc.disable)
			}
			if _, _, err := c.KernelTimesStart(); err != nil {
				t.Fatalf("a start after the finalize: %v", err)
			}
			a.launch("launch")
			if rep, err = c.KernelTimes(false); err != nil || len(rep.Records) != 1 || len(rep.Names) != 1 || rep.Records[0].CPU == 0 {
				t.Fatalf("after a new start: %+v %v: want one stamped record, its name sent again", rep, err)
			}
		})
	}

	// With API records: a kernel record whose correlation comes a flush later waits one read
	// for it; at the last read it goes untimed, counted, never dropped.
	t.Run("correlation late", func(t *testing.T) {
		a, c := f.startDialed(t, "GPUBPF_CUPTI="+lib, "GPUBPF_CUPTI_JOIN=api", "FAKECUPTI_CORR_LATE=1")
		if _, _, err := c.KernelTimesStart(); err != nil {
			t.Fatal(err)
		}
		a.launch("launch")
		a.launch("launch")
		if rep, err := c.KernelTimes(false); err != nil || len(rep.Records) != 0 {
			t.Fatalf("first read: %+v %v: want both records held for their correlations", rep, err)
		}
		rep, err := c.KernelTimes(false)
		if err != nil || len(rep.Records) != 2 || rep.Records[0].CPU == 0 || rep.Records[1].CPU == 0 {
			t.Fatalf("second read: %+v %v: want both records stamped", rep, err)
		}
		a.launch("launch")
		rep, err = c.KernelTimes(true)
		if err != nil || len(rep.Records) != 1 || rep.Records[0].CPU != 0 || rep.Records[0].End <= rep.Records[0].Start {
			t.Fatalf("last read: %+v %v: want the record untimed, with its run time", rep, err)
		}
		if !strings.Contains(rep.Library, "1 kernels without their launch's record") {
			t.Errorf("the read's account %q does not count the record without its correlation", rep.Library)
		}
	})

	// A CUPTI whose kernel records none of the API records ties to
	// a launch: past 64 such records the launches are stamped from its
	// callback, and timed again.
	t.Run("external correlation joins nothing", func(t *testing.T) {
		a, c := f.startDialed(t, "GPUBPF_CUPTI="+lib, "GPUBPF_CUPTI_JOIN=api", "FAKECUPTI_NOCORR=1")
		if _, _, err := c.KernelTimesStart(); err != nil {
			t.Fatal(err)
		}
		for range 70 {
			a.launch("launch")
		}
		if rep, err := c.KernelTimes(false); err != nil || len(rep.Records) != 0 {
			t.Fatalf("first read: %+v %v: want the records held for their correlations", rep, err)
		}
		rep, err := c.KernelTimes(false)
		if err != nil || len(rep.Records) != 70 || rep.Records[0].CPU != 0 {
			t.Fatalf("second read: %d records %v: want 70, untimed", len(rep.Records), err)
		}
		if !strings.Contains(rep.Library, "joined none of the launches' records") {
			t.Errorf("the read's account %q does not say the join fell back", rep.Library)
		}
		a.launch("launch")
		rep, err = c.KernelTimes(true)
		if err != nil || len(rep.Records) != 1 || rep.Records[0].CPU == 0 {
			t.Fatalf("after the fallback: %+v %v: want the launch stamped from CUPTI's callback", rep, err)
		}
	})

	_, busy := f.startDialed(t, "GPUBPF_CUPTI="+lib, "FAKECUPTI_BUSY=1")
	if _, _, err := busy.KernelTimesStart(); err == nil || !strings.Contains(err.Error(), "held by another subscriber") {
		t.Errorf("a held CUPTI: %v, want refused as held by another subscriber", err)
	}
}
