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
	k, lr := loadVecAddProbe(t, c, ".visible .entry probe_lw (.param .u64 a, .param .u32 n, .param .u64 h0, .param .u64 h1)\n{\n}\n", "probe_lw")
	fn := lr.Functions[0].Handle
	mf := newMemfd(t, 4096)
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
	// The agent's own clock: a driver-API launch reaches the agent before
	// its uprobe in libcuda, so the agent stamps it itself (kind 2).
	checkOwn := func(cmd string, r ran) {
		t.Helper()
		if r.name != "probe_lw" || r.args[2] == 0 || r.args[2] == r.stamp || r.args[3] != stream|2<<56 {
			t.Errorf("%s: ran %s with args %v (app stamp %d); want the agent's own time and kind 2", cmd, r.name, r.args, r.stamp)
		}
	}
	for _, form := range []string{"kp", "xp"} {
		// a fresh runtime-API stamp (kind 1, pending) of the launching
		// thread: passed with its kind, and taken
		r := a.run(form + stampArgs(0, 0x81, 0))
		if r.stamp == 0 {
			t.Fatalf("%s: the app did not stamp", form)
		}
		check(form, r, r.stamp, stream|1<<56)
		if form == "xp" && r.xsize != 32 {
			t.Errorf("xp: packed buffer of %d bytes, want 32 (16 of the kernel's + 16)", r.xsize)
		}
		// the same thread's next launch with no new stamp: not reused
		checkOwn(form+" stamp taken", a.run(form))
		// a stamp without the pending mark, another thread's tag, a stale
		// stamp, one from the future: the agent's own time
		checkOwn(form+" not pending", a.run(form+stampArgs(0, 7, 0)))
		checkOwn(form+" other thread", a.run(form+stampArgs(1, 0x81, 0)))
		checkOwn(form+" stale", a.run(form+stampArgs(0, 0x81, -2_000_000)))
		checkOwn(form+" future", a.run(form+stampArgs(0, 0x81, 5_000_000_000)))
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
	if err != nil || len(st) != 1 || st[0].Failures != 0 || st[0].Disabled || st[0].Launches != 14 { // 2 x 6 + 2; graph nodes are not launches
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
	if d := time.Since(t0); d < time.Second { // the message says which bound ended it
		t.Errorf("stalled call took %v, want its 1 s", d)
	}
	for i := 0; i < 3; i++ {
		r, err := c.Clock(OnDevice(0), 8)
		if err != nil {
			t.Fatalf("call %d after the stall: %v", i, err)
		}
		now := agentproto.MonoNow()
		if d := r.Offset - 12345; d > int64(r.Bound) || -d > int64(r.Bound) {
			t.Errorf("offset %d ± %d, want 12345", r.Offset, r.Bound)
		}
		if r.At > now || now-r.At > uint64(5*time.Second) {
			t.Errorf("at %d, now %d", r.At, now)
		}
	}
}

// output sends one command to the app and returns what it and the fake
// driver printed for it, up to DONE.
func (a *app) output(cmd string) []string {
	a.t.Helper()
	fmt.Fprintln(a.in, cmd)
	var ls []string
	for {
		l := a.expect("")
		if l == "DONE" {
			return ls
		}
		ls = append(ls, l)
	}
}

// A stream memory write the fake driver saw.
type memWrite struct {
	stream      string
	addr, value uint64
}

// graphLaunch runs a graph launch command and sorts the fake driver's
// stream writes into those before and after the graph launch itself.
func (a *app) graphLaunch(cmd string) (before, after []memWrite, stamp uint64) {
	a.t.Helper()
	launched := false
	for _, l := range a.output(cmd) {
		f := strings.Fields(l)
		switch {
		case len(f) == 4 && f[0] == "WRITE":
			w := memWrite{stream: f[1]}
			w.addr, _ = strconv.ParseUint(f[2], 0, 64)
			w.value, _ = strconv.ParseUint(f[3], 10, 64)
			if launched {
				after = append(after, w)
			} else {
				before = append(before, w)
			}
		case len(f) == 3 && f[0] == "GRAPHLAUNCH":
			launched = true
		case len(f) == 2 && f[0] == "STAMP":
			stamp, _ = strconv.ParseUint(f[1], 10, 64)
		case len(f) == 2 && f[0] == "GRAPHLAUNCHED" && f[1] != "0":
			a.t.Fatalf("%s: the graph launch returned %s", cmd, f[1])
		}
	}
	if !launched {
		a.t.Fatalf("%s: the graph was not launched", cmd)
	}
	return before, after, stamp
}

// Graph kernel nodes of a probe with launch words get their graph's stamp
// word (kind 0xFE): one word per graph, for nodes added to it and for
// launches captured into it. An exec instantiated from the graph writes the
// graph launch's stamp to the word on the launch's stream right before the
// graph and 0 right after it; the stamp is the launching thread's fresh
// pending runtime-API stamp (cudaGraphLaunch), else the agent's own clock.
// No writes into a capturing stream, for a graph without a word, or once
// the probe is gone.
// graphWordsSetup starts the app (with env) and activates a clone of
// vecAdd with launch words and stamp slots.
func graphWordsSetup(t *testing.T, f fixture, env ...string) (a *app, c *Conn, kernel uint64, stampArgs func(tid, kind int, dt int64) string) {
	t.Helper()
	a = f.start(t, env...)
	c, err := Dial(a.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	k, lr := loadVecAddProbe(t, c, ".visible .entry probe_lw (.param .u64 a, .param .u32 n, .param .u64 h0, .param .u64 h1)\n{\n}\n", "probe_lw")
	mfd, err := unix.MemfdCreate("gpubpf-lw", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	mf := os.NewFile(uintptr(mfd), "memfd")
	t.Cleanup(func() { mf.Close() })
	mf.Truncate(4096)
	reg, err := c.RegisterMemfd(OnDevice(0), mf, 4096, 0)
	if err != nil {
		t.Fatal(err)
	}
	const slotOff, slots = 256, 64
	lw := agentproto.LaunchWords{Hidden: agentproto.LaunchHiddenWords, Params: 2, BufOffset: 16,
		Region: reg.RegionID, Offset: slotOff, Slots: slots}
	if err := c.ActivateWith(k.Handle, lr.CloneID, lr.Functions[0].Handle, lw); err != nil {
		t.Fatal(err)
	}
	return a, c, k.Handle, func(tid, kind int, dt int64) string {
		return fmt.Sprintf(" %d %d %d %d %d", reg.HostAddr+slotOff, slots, tid, kind, dt)
	}
}

// beginCapture starts a stream capture on the app's capture stream.
func beginCapture(t *testing.T, a *app) {
	t.Helper()
	for _, l := range a.output("capbegin v2 0xca970000") {
		if strings.HasPrefix(l, "CAPBEGUN ") && l != "CAPBEGUN 0" {
			t.Fatalf("capbegin: %s", l)
		}
	}
}

func TestGraphWords(t *testing.T) {
	f := build(t)
	a, c, kernel, stampArgs := graphWordsSetup(t, f)
	defer c.Close()

	word := func(cmd string) uint64 {
		t.Helper()
		r := a.run(cmd)
		w1 := r.args[3]
		if r.name != "probe_lw" || r.args[0] != 0x1234 || r.args[1] != 77 || r.args[2] != 0 ||
			w1>>56 != agentproto.LaunchKindGraphWord || w1&agentproto.LaunchStreamMask == 0 || w1%8 != 0 {
			t.Fatalf("%s: ran %s with args %v; want probe_lw with 0x1234 77 0 and kind 0xFE | a word's address", cmd, r.name, r.args)
		}
		return w1 & agentproto.LaunchStreamMask
	}
	wa := word("gn 0x6a000")
	if w := word("gn 0x6a000"); w != wa {
		t.Errorf("two nodes of one graph: words %#x and %#x", wa, w)
	}
	wb := word("gn 0x6b000")
	beginCapture(t, a)
	wc := word("cap")
	if w := word("cap"); w != wc {
		t.Errorf("two launches captured into one graph: words %#x and %#x", wc, w)
	}
	if wa == wb || wa == wc || wb == wc {
		t.Errorf("three graphs share words: %#x %#x %#x", wa, wb, wc)
	}

	exec := func(graph string) string {
		t.Helper()
		for _, l := range a.output("inst " + graph) {
			if f := strings.Fields(l); len(f) == 3 && f[0] == "EXEC" && f[1] == "0" {
				return f[2]
			}
		}
		t.Fatalf("inst %s: no exec", graph)
		return ""
	}
	const appStream = "0xab007f00dead0010"
	ea := exec("0x6a000")
	check := func(what string, before, after []memWrite, stream string, word, value uint64) {
		t.Helper()
		// one write, before the graph: none after it (it would cost as
		// much again on back-to-back graphs)
		if len(before) != 1 || len(after) != 0 || before[0].stream != stream || before[0].addr != word ||
			before[0].value != value {
			t.Errorf("%s: writes before %v, after %v; want %#x = %d on %s before, nothing after", what, before, after, word, value, stream)
		}
	}
	// cudaGraphLaunch's stamp (kind 3, pending: its driver call is this one)
	before, after, st := a.graphLaunch("gl " + ea + stampArgs(0, 0x83, 0))
	if st == 0 {
		t.Fatal("the app did not stamp")
	}
	check("runtime stamp", before, after, appStream, wa, st)
	// not this call's stamp: a driver call's (its uprobe fires after the
	// wrapper), a stale one, another thread's: the agent's clock instead
	for _, tc := range []struct {
		what      string
		tid, kind int
		dt        int64
	}{{"driver stamp", 0, 4, 0}, {"stale", 0, 0x83, -2_000_000}, {"other thread", 1, 0x83, 0}} {
		before, after, st := a.graphLaunch("gl " + ea + stampArgs(tc.tid, tc.kind, tc.dt))
		if len(before) == 1 && (before[0].value <= st || before[0].value-st > uint64(time.Second)) {
			t.Errorf("%s: stamp %d written for a slot stamped %d; want the agent's clock, later", tc.what, before[0].value, st)
		}
		if len(before) == 1 {
			check(tc.what, before, after, appStream, wa, before[0].value)
		} else {
			t.Errorf("%s: writes before %v, after %v", tc.what, before, after)
		}
	}
	// _ptsz on stream 0: the per-thread default stream
	before, after, _ = a.graphLaunch("glp " + ea)
	if len(before) == 1 {
		check("ptsz", before, after, "0x2", wa, before[0].value)
	} else {
		t.Errorf("ptsz: writes before %v, after %v", before, after)
	}
	// into a capturing stream: no writes
	if before, after, _ := a.graphLaunch("glc " + ea); len(before)+len(after) != 0 {
		t.Errorf("graph launched into a capture: writes %v %v", before, after)
	}
	// a graph without a word
	if before, after, _ := a.graphLaunch("gl " + exec("0x6c000")); len(before)+len(after) != 0 {
		t.Errorf("graph without a word: writes %v %v", before, after)
	}
	// the graph being captured: its exec writes the captured nodes' word
	var capGraph string
	for _, l := range a.output("capgraph") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == "CAPGRAPH" {
			capGraph = f[1]
		}
	}
	ec := exec(capGraph)
	before, after, st = a.graphLaunch("gl " + ec + stampArgs(0, 0x83, 0))
	check("captured graph", before, after, appStream, wc, st)

	// No probe: graphs launch untouched.
	if n, err := c.Deactivate(kernel); err != nil || n != 1 {
		t.Fatalf("deactivate: %d %v", n, err)
	}
	if before, after, _ := a.graphLaunch("gl " + ea + stampArgs(0, 0x83, 0)); len(before)+len(after) != 0 {
		t.Errorf("no probe: writes %v %v", before, after)
	}
}

// GPUBPF_AGENT_GRAPH_WORDS=0: graph kernel nodes get "no stamp" (0xFF) and
// graph launches are left alone.
func TestGraphWordsOff(t *testing.T) {
	f := build(t)
	a, c, _, stampArgs := graphWordsSetup(t, f, "GPUBPF_AGENT_GRAPH_WORDS=0")
	defer c.Close()
	beginCapture(t, a)
	for _, cmd := range []string{"gn 0x6a000", "cap"} {
		if r := a.run(cmd); r.name != "probe_lw" || r.args[2] != 0 || r.args[3] != agentproto.LaunchKindGraph<<56 {
			t.Errorf("%s: ran %s with %v; want kind 0xFF and no word", cmd, r.name, r.args)
		}
	}
	var ea string
	for _, l := range a.output("inst 0x6a000") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "EXEC" {
			ea = f[2]
		}
	}
	if before, after, _ := a.graphLaunch("gl " + ea + stampArgs(0, 0x83, 0)); len(before)+len(after) != 0 {
		t.Errorf("graph words off: writes %v %v", before, after)
	}
}
