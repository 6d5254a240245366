package agentclient

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpubpf/gpubpf/pkg/runtime/agentproto"
)

// The application destroys the context a tool's clone, memory and stream
// live in: the last release of its primary context (a driver-API program's
// cuDevicePrimaryCtxRelease), a reset (cudaDeviceReset) or cuCtxDestroy.
// The agent forgets what it had there before the context goes, so no later
// request touches it (the stand-in driver aborts the process if one does,
// as the real one crashed in cuStreamSynchronize), the probe's launch
// count survives, a request naming the context is refused, and the
// kernels run as the application wrote them.
func TestContextDestroyed(t *testing.T) {
	f := build(t)
	for _, how := range []struct{ cmd, reply string }{
		{"release0", "RELEASED 0 0"},
		{"reset0", "RESET 0 0"},
		{"destroy", "DESTROYED 0"},
	} {
		t.Run(how.cmd, func(t *testing.T) {
			a, c := f.startDialed(t)
			fmt.Fprintln(a.in, "ctx")
			ctx, err := strconv.ParseUint(strings.TrimPrefix(a.expect("CTX "), "CTX 0x"), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			a.expect("DONE")
			in := InContext(ctx) // as the runtime places a module's clone: no retain of its own
			inv, err := c.Inventory(true)
			if err != nil {
				t.Fatal(err)
			}
			k := findKernel(inv, "_Z6vecAddPfi", agentproto.KindKernel)
			lr, err := c.LoadPTX(in, []byte(".visible .entry probe_vecAdd (\n)"), "probe_vecAdd")
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Activate(k.Handle, lr.CloneID, lr.Functions[0].Handle); err != nil {
				t.Fatal(err)
			}
			addr, err := c.Alloc(in, 256)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Read(in, addr, 16); err != nil { // the session's stream in ctx
				t.Fatal(err)
			}
			for range 2 {
				if got := a.launch("launch"); got != "probe_vecAdd" {
					t.Fatalf("probe active: ran %s", got)
				}
			}

			fmt.Fprintln(a.in, how.cmd)
			a.expect(how.reply)
			a.expect("DONE")

			_, err = c.Read(in, addr, 16)
			var ae *agentproto.Error
			if !errors.As(err, &ae) || ae.CUResult != 709 {
				t.Fatalf("read in the destroyed context: want CUresult 709, got %v", err)
			}
			st, err := c.Stats()
			if err != nil || len(st) != 1 || st[0].Launches != 2 || st[0].Kernel != k.Handle {
				t.Fatalf("stats after the context went: %+v %v (want the 2 launches kept)", st, err)
			}
			fmt.Fprintln(a.in, "retain0")
			a.expect("RETAINED 0 0")
			a.expect("DONE")
			if got := a.launch("launch"); got != "_Z6vecAddPfi" {
				t.Fatalf("after its clone's context went: ran %s", got)
			}
			if err := c.Detach(); err != nil {
				t.Fatal(err)
			}
			// and the context handle, given out again, serves requests
			if _, err := c.Alloc(in, 256); err != nil {
				t.Fatalf("alloc in the context retained again: %v", err)
			}
			if got := a.launch("launch"); got != "_Z6vecAddPfi" {
				t.Fatalf("after detach: ran %s", got)
			}
			if strings.Contains(a.stderr.String(), "FAKECUDA:") {
				t.Fatalf("the agent used the destroyed context: %s", a.stderr)
			}
		})
	}
}

// Probes turned off keep their launch counts in the stats (the tool reads
// its maps after turning them off, and reports the launches they hold);
// a kernel probed again reports both activations.
func TestDeactivateKeepsCounts(t *testing.T) {
	f := build(t)
	a, c := f.startDialed(t)
	k, lr := loadVecAddProbe(t, c, ".visible .entry probe_vecAdd (\n)", "probe_vecAdd")
	activate := func() {
		t.Helper()
		if err := c.Activate(k.Handle, lr.CloneID, lr.Functions[0].Handle); err != nil {
			t.Fatal(err)
		}
	}
	activate()
	for range 2 {
		if got := a.launch("launch"); got != "probe_vecAdd" {
			t.Fatalf("probe active: ran %s", got)
		}
	}
	if n, err := c.Deactivate(0); err != nil || n != 1 {
		t.Fatalf("deactivate: %d %v", n, err)
	}
	if got := a.launch("launch"); got != "_Z6vecAddPfi" {
		t.Fatalf("after deactivate: ran %s", got)
	}
	st, err := c.Stats()
	if err != nil || len(st) != 1 || st[0].Launches != 2 || st[0].CloneID != lr.CloneID {
		t.Fatalf("stats after deactivate: %+v %v", st, err)
	}
	activate()
	a.launch("launch")
	st, err = c.Stats()
	var sum uint64
	for _, s := range st {
		sum += s.Launches
	}
	if err != nil || len(st) != 2 || sum != 3 {
		t.Fatalf("stats of a kernel probed twice: %+v %v (want 2 + 1)", st, err)
	}
}

// A tool attaching while many threads launch back to back: on the GPU
// machine the agent's first driver call (an allocation) starved on a driver
// lock the launching threads took in turn (fault case 2d: 8 threads, no
// answer within 30 s). The stand-in driver models that lock
// (FAKECUDA_DRIVER_LOCK) and counts the launches that took it while one of
// the agent's operations waited: the agent's requests must get through
// long before the storm ends (starved, they wait through all of it), and the
// program's launches go on. Counted, not timed: a busy machine slows the
// storm and the requests alike.
func TestAttachWhileManyThreadsLaunch(t *testing.T) {
	f := build(t)
	a, c := f.startDialed(t, "FAKECUDA_DRIVER_LOCK=1")
	fmt.Fprintln(a.in, "storm 8 4000")
	a.expect("STORMING")
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	for range 5 {
		p, err := c.Alloc(OnDevice(0), 4096)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Write(OnDevice(0), p, make([]byte, 64)); err != nil {
			t.Fatal(err)
		}
	}
	took := time.Since(start)
	f2 := strings.Fields(a.expect("STORMED "))
	n, _ := strconv.Atoi(f2[1])
	overtook, _ := strconv.Atoi(f2[2])
	t.Logf("5 allocations and writes while 8 threads launched: %v; %d launches, %d of them while an allocation or write waited", took, n, overtook)
	if n == 0 {
		t.Fatal("the program's threads launched nothing")
	}
	// Starved, they wait through nearly all of it (92-95% measured); with
	// the agent's gate 2-20% (the more other work keeps the CPUs busy,
	// the more launches run before the request's thread gets one).
	if overtook < 0 || overtook*2 > n {
		t.Fatalf("5 allocations and writes waited through %d of the storm's %d launches: starved on the driver lock", overtook, n)
	}
}
