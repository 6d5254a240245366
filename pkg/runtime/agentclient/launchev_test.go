package agentclient

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/gpubpf/gpubpf/pkg/runtime/agentproto"
	"github.com/gpubpf/gpubpf/pkg/runtime/launchev"
)

// Every launch through the agent becomes a record in the tool's ring, with
// what gpuevent_snoop shows (kernel handle, shape, stream, thread, result,
// duration, caller); a full ring counts drops, so launched = read +
// dropped exactly; one tool per process; a stop stops.
func TestLaunchEvents(t *testing.T) {
	f := build(t)
	a := f.start(t)
	pid := a.cmd.Process.Pid
	c, err := Dial(pid)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	inv, err := c.Inventory(true)
	if err != nil {
		t.Fatal(err)
	}
	k := findKernel(inv, "_Z6vecAddPfi", agentproto.KindKernel)
	ring, err := launchev.New(8)
	if err != nil {
		t.Fatal(err)
	}
	defer ring.Close()
	beforeAttach := agentproto.MonoNow()
	attachNs, err := c.LaunchEvents(ring.File(), ring.Size())
	if err != nil {
		t.Fatal(err)
	}
	// Protocol 7: when the events came on, on the agent's clock (the
	// same CLOCK_MONOTONIC): within the call, and before every launch
	// made after it.
	if afterAttach := agentproto.MonoNow(); attachNs < beforeAttach || attachNs > afterAttach {
		t.Fatalf("attach_ns %d, want within the call (%d to %d)", attachNs, beforeAttach, afterAttach)
	}

	before := agentproto.MonoNow()
	for _, cmd := range []string{"launch", "launch", "launchp"} {
		if got := a.launch(cmd); got != "_Z6vecAddPfi" {
			t.Fatalf("%s ran %s", cmd, got)
		}
	}
	after := agentproto.MonoNow()
	var recs []launchev.Record
	ring.Read(func(r *launchev.Record) { recs = append(recs, *r) })
	if len(recs) != 3 {
		t.Fatalf("%d records for 3 launches: %+v", len(recs), recs)
	}
	for i, r := range recs {
		wantAPI := launchev.LaunchKernel
		if i == 2 {
			wantAPI = launchev.LaunchKernelPTSZ
		}
		if r.API != wantAPI || r.Func != k.Handle || r.Grid != [3]uint32{1, 1, 1} || r.Block != [3]uint32{32, 1, 1} ||
			r.Result != 0 || r.TID != uint32(pid) || r.Caller == 0 || r.TS < before || r.TS < attachNs || r.TS+uint64(r.Dur) > after ||
			r.Sequence != uint64(i) {
			t.Errorf("record %d: %+v (want %v of handle %#x, tid %d, between %d and %d)", i, r, wantAPI, k.Handle, pid, before, after)
		}
	}

	other, err := Dial(pid)
	if err != nil {
		t.Fatal(err)
	}
	ring2, err := launchev.New(8)
	if err != nil {
		t.Fatal(err)
	}
	defer ring2.Close()
	if _, err := other.LaunchEvents(ring2.File(), ring2.Size()); err == nil || !strings.Contains(err.Error(), "already takes") {
		t.Fatalf("second tool's launch events: want refused, got %v", err)
	}
	other.Close()

	// 4 threads launch far more than the 8 slots hold, nobody reading.
	fmt.Fprintln(a.in, "storm 4 200")
	a.expect("STORMING")
	launched, _ := strconv.ParseUint(strings.Fields(a.expect("STORMED "))[1], 10, 64)
	n := ring.Read(func(*launchev.Record) {})
	if n != 8 || uint64(n)+ring.Dropped() != launched || ring.Claimed() != 3+8 {
		t.Fatalf("storm of %d launches: read %d, dropped %d, claimed %d: want 8 read and the rest dropped", launched, n, ring.Dropped(), ring.Claimed())
	}

	if err := c.StopLaunchEvents(); err != nil {
		t.Fatal(err)
	}
	a.launch("launch")
	if n := ring.Read(func(*launchev.Record) {}); n != 0 {
		t.Fatalf("%d records after the stop", n)
	}
	// and the slot is free for another tool
	if _, err := c.LaunchEvents(ring2.File(), ring2.Size()); err != nil {
		t.Fatalf("launch events after a stop: %v", err)
	}
}
