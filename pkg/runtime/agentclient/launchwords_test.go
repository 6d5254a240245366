package agentclient

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpubpf/gpubpf/pkg/runtime/agentproto"
)

// run sends one command to the app and collects what the fake driver
// printed for it: the kernel that ran, its arguments and the app's stamp.
type ran struct {
	name  string
	args  map[int]uint64
	stamp uint64
	xsize int
}

func (a *app) run(cmd string) ran {
	a.t.Helper()
	fmt.Fprintln(a.in, cmd)
	r := ran{args: map[int]uint64{}, xsize: -1}
	for {
		l := a.expect("")
		f := strings.Fields(l)
		switch {
		case l == "DONE":
			return r
		case len(f) == 2 && (f[0] == "LAUNCH" || f[0] == "GRAPHNODE"):
			r.name = f[1]
		case len(f) == 2 && f[0] == "STAMP":
			r.stamp, _ = strconv.ParseUint(f[1], 10, 64)
		case len(f) == 2 && f[0] == "XSIZE":
			r.xsize, _ = strconv.Atoi(f[1])
		case len(f) == 3 && f[0] == "ARG":
			i, _ := strconv.Atoi(f[1])
			r.args[i], _ = strconv.ParseUint(f[2], 10, 64)
		}
	}
}

// A clone activated with launch words gets the launching thread's CPU stamp
// and the launch's stream as two extra parameters, in both argument forms
// and in graph kernel nodes; stamps that are not the launch's read as 0.
func TestLaunchWords(t *testing.T) {
	f := build(t)
	a := f.start(t)
	c, err := Dial(a.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	inv, err := c.Inventory(true)
	if err != nil {
		t.Fatal(err)
	}
	k := findKernel(inv, "_Z6vecAddPfi", agentproto.KindKernel)
	lr, err := c.LoadPTX(OnDevice(0), []byte(".visible .entry probe_lw (.param .u64 a, .param .u32 n, .param .u64 h0, .param .u64 h1)\n{\n}\n"), "probe_lw")
	if err != nil || k == nil {
		t.Fatalf("load: %v (kernel %v)", err, k)
	}
	fn := lr.Functions[0].Handle
	mfd, err := unix.MemfdCreate("gpubpf-lw", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	mf := os.NewFile(uintptr(mfd), "memfd")
	defer mf.Close()
	mf.Truncate(4096)
	reg, err := c.RegisterMemfd(OnDevice(0), mf, 4096, 0)
	if err != nil {
		t.Fatal(err)
	}
	const slotOff, slots = 256, 64
	lw := agentproto.LaunchWords{Hidden: agentproto.LaunchHiddenWords, Params: 2, BufOffset: 16,
		Region: reg.RegionID, Offset: slotOff, Slots: slots}

	for _, bad := range []agentproto.LaunchWords{
		{Hidden: 1},
		{Hidden: 2, BufOffset: 12},
		{Hidden: 2, Region: 999, Slots: 64},
		{Hidden: 2, Region: reg.RegionID, Slots: 48},
		{Hidden: 2, Region: reg.RegionID, Offset: 4096 - 512, Slots: 64}, // does not fit
		{Hidden: 2, Region: reg.RegionID, Offset: 4, Slots: 1},           // misaligned
		{Region: reg.RegionID, Slots: 64},                                // region without words
	} {
		err := c.ActivateWith(k.Handle, lr.CloneID, fn, bad)
		var ae *agentproto.Error
		if !errors.As(err, &ae) || ae.Status != agentproto.StatusBadRequest {
			t.Errorf("activate with %+v: got %v, want a bad-request error", bad, err)
		}
	}
	if err := c.ActivateWith(k.Handle, lr.CloneID, fn, lw); err != nil {
		t.Fatal(err)
	}

	const stream = 0xAB007f00dead0010 & agentproto.LaunchStreamMask
	stampArgs := func(tid, kind int, dt int64) string {
		return fmt.Sprintf(" %d %d %d %d %d", reg.HostAddr+slotOff, slots, tid, kind, dt)
	}
	check := func(cmd string, r ran, w0, w1 uint64) {
		t.Helper()
		if r.name != "probe_lw" || r.args[0] != 0x1234 || r.args[1] != 77 || r.args[2] != w0 || r.args[3] != w1 {
			t.Errorf("%s: ran %s with args %v; want probe_lw with 0x1234 77 %d %#x", cmd, r.name, r.args, w0, w1)
		}
	}
	for _, form := range []string{"kp", "xp"} {
		// a fresh stamp of the launching thread: passed with its kind
		r := a.run(form + stampArgs(0, 7, 0))
		if r.stamp == 0 {
			t.Fatalf("%s: the app did not stamp", form)
		}
		check(form, r, r.stamp, stream|7<<56)
		if form == "xp" && r.xsize != 32 {
			t.Errorf("xp: packed buffer of %d bytes, want 32 (16 of the kernel's + 16)", r.xsize)
		}
		// another thread's tag, a stale stamp, one from the future: no stamp
		check(form+" other thread", a.run(form+stampArgs(1, 7, 0)), 0, stream)
		check(form+" stale", a.run(form+stampArgs(0, 7, -2_000_000)), 0, stream)
		check(form+" future", a.run(form+stampArgs(0, 7, 5_000_000_000)), 0, stream)
	}
	// Unregistering the region leaves no dangling slot pointer: the words
	// still come, without a stamp (a read of the unmapped slots would kill
	// the app).
	if err := c.UnregisterHost(reg.RegionID); err != nil {
		t.Fatal(err)
	}
	check("kp after unregister", a.run("kp"), 0, stream)
	check("xp after unregister", a.run("xp"), 0, stream)

	// Graph kernel nodes: no per-launch stamp, kind 0xFF (a graph pins the
	// clone, and with it the session's regions: last).
	for _, cmd := range []string{"gk", "gx"} {
		r := a.run(cmd)
		check(cmd, r, 0, agentproto.LaunchKindGraph<<56)
	}

	st, err := c.Stats()
	if err != nil || len(st) != 1 || st[0].Failures != 0 || st[0].Disabled || st[0].Launches != 10 { // 8 + 2; graph nodes are not launches
		t.Fatalf("stats %+v %v", st, err)
	}

	// Plain Activate: the clone gets the application's arguments only.
	lr2, err := c.LoadPTX(OnDevice(0), []byte(".visible .entry probe_plain (.param .u64 a, .param .u32 n)\n{\n}\n"), "probe_plain")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Activate(k.Handle, lr2.CloneID, lr2.Functions[0].Handle); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"kp", "xp"} {
		if r := a.run(cmd); r.name != "probe_plain" || len(r.args) != 2 || r.args[0] != 0x1234 || r.args[1] != 77 ||
			(cmd == "xp" && r.xsize != 12) {
			t.Errorf("%s, plain activate: ran %s with %v (buffer %d bytes)", cmd, r.name, r.args, r.xsize)
		}
	}
}

// The clock op measures globaltimer - CLOCK_MONOTONIC (the fake driver's
// timer runs 12345 ns ahead) within its error bound; a GPU too busy to start
// the kernel gives an error, and the next call works.
func TestClock(t *testing.T) {
	f := build(t)
	a := f.start(t, "FAKECUDA_CLOCK_STALL=1")
	c, err := Dial(a.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, n := range []int{0, 65} {
		if _, err := c.Clock(OnDevice(0), n); err == nil {
			t.Errorf("%d rounds accepted", n)
		}
	}
	var ae *agentproto.Error
	err = c.call(agentproto.OpClock, &agentproto.ClockRequest{Rounds: 65}, &agentproto.ClockReply{}, nil)
	if !errors.As(err, &ae) || ae.Status != agentproto.StatusBadRequest {
		t.Errorf("agent took 65 rounds: %v", err)
	}

	t0 := time.Now()
	_, err = c.Clock(OnDevice(0), 8)
	if !errors.As(err, &ae) || !strings.Contains(ae.Message, "did not start the clock kernel within 1 s") {
		t.Fatalf("stalled GPU: got %v", err)
	}
	if d := time.Since(t0); d < time.Second || d > 3*time.Second {
		t.Errorf("stalled call took %v, want about 1 s", d)
	}
	for i := 0; i < 3; i++ {
		r, err := c.Clock(OnDevice(0), 8)
		if err != nil {
			t.Fatalf("call %d after the stall: %v", i, err)
		}
		var ts unix.Timespec
		unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
		now := uint64(ts.Nano())
		if d := r.Offset - 12345; d > int64(r.Bound) || -d > int64(r.Bound) {
			t.Errorf("offset %d ± %d, want 12345", r.Offset, r.Bound)
		}
		if r.At > now || now-r.At > uint64(5*time.Second) {
			t.Errorf("at %d, now %d", r.At, now)
		}
	}
}
