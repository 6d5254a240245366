package launchlate

import (
	"cmp"
	"encoding/binary"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpubpf/gpubpf/pkg/runtime"
	"github.com/gpubpf/gpubpf/pkg/toolkit"
)

func putStart(tab []byte, slot int, grid uint64, kernel uint32, gpu, cpu, stream uint64, kind uint8) {
	rec := tab[slot*startSize:]
	binary.LittleEndian.PutUint64(rec, grid|uint64(kernel)<<48)
	binary.LittleEndian.PutUint64(rec[8:], gpu)
	binary.LittleEndian.PutUint64(rec[16:], cpu)
	binary.LittleEndian.PutUint64(rec[24:], stream|uint64(kind)<<56)
}

// TestTrackerNewStartsOnly: a start is taken once, when its slot first
// shows it; a slot reused by a later launch is a new start.
func TestTrackerNewStartsOnly(t *testing.T) {
	tr := newTracker()
	src := source{pid: 7, dev: 0}
	tab := make([]byte, 4*startSize)
	putStart(tab, 1, 5, 3, 1000, 900, 0x55, kindRuntime)
	tr.ingest(src, tab, tab)
	tr.ingest(src, tab, tab)
	if tr.read != 1 || len(tr.pending[src]) != 1 {
		t.Fatalf("read %d, pending %d; want 1, 1", tr.read, len(tr.pending[src]))
	}
	got := tr.pending[src][0]
	if got.grid != 5 || got.kernel != 3 || got.gpu != 1000 || got.cpu != 900 || got.stream != 0x55 || got.kind != kindRuntime {
		t.Fatalf("decoded %+v", got)
	}
	putStart(tab, 1, 9, 3, 2000, 1900, 0x55, kindRuntime)
	tr.ingest(src, tab, tab)
	if tr.read != 2 {
		t.Fatalf("reused slot not taken: read %d", tr.read)
	}
}

// TestResolveWaitsForCalibration: a start is converted with the
// calibrations around its CPU time (interpolated), waits while none comes
// after it, and a start without a CPU stamp is untimed at once.
func TestResolveWaitsForCalibration(t *testing.T) {
	tr := newTracker()
	src := source{pid: 1}
	tab := make([]byte, 4*startSize)
	// GPU clock 1,000,000 ns ahead at CPU 10,000; 1,000,100 at CPU 20,000.
	putStart(tab, 0, 1, 0, 15000+1000050+4000, 15000, 0, kindRuntime) // 4 us late
	putStart(tab, 1, 2, 0, 99, 0, 0, kindDriver)                      // no stamp
	tr.ingest(src, tab, tab)
	var lats []latency
	untimed := 0
	timed := func(_ source, l latency) { lats = append(lats, l) }
	un := func(source, start) { untimed++ }
	tr.addClock(src, runtime.ClockSample{Offset: 1000000, Bound: 300, At: 10000})
	tr.resolve(false, 0, timed, un)
	if len(lats) != 0 || untimed != 1 {
		t.Fatalf("before a later calibration: %d timed, %d untimed; want 0, 1", len(lats), untimed)
	}
	tr.addClock(src, runtime.ClockSample{Offset: 1000100, Bound: 500, At: 20000})
	tr.resolve(false, 0, timed, un)
	if len(lats) != 1 || lats[0].ns != 4000 || lats[0].bound != 500 {
		t.Fatalf("got %+v, want one latency of 4000 ns, bound 500", lats)
	}
}

// TestBelowBound: latencies the clocks cannot tell from zero are shown as
// "< bound", never as 0 or negative.
func TestBelowBound(t *testing.T) {
	s := newStats()
	s.add(latency{ns: -200, bound: 800})
	s.add(latency{ns: 300, bound: 800})
	v, below := s.quantile(50)
	if !below {
		t.Fatalf("p50 %d not marked below the bound", v)
	}
	if got := fmtLat(v, below, s.bound); got != "< 800 ns" {
		t.Fatalf("shown as %q", got)
	}
	s.add(latency{ns: 250000, bound: 800})
	if v, below := s.max(); below || fmtLat(v, below, s.bound) != "250.1 us" && fmtLat(v, below, s.bound) != "250.0 us" {
		t.Fatalf("max %d shown as %q", v, fmtLat(v, below, s.bound))
	}
	if s.below != 2 || s.n != 3 {
		t.Fatalf("below %d of %d, want 2 of 3", s.below, s.n)
	}
}

// TestTrackerGraphRelaunch: a graph's kernel keeps its grid id from one
// graph launch to the next; its new GPU time makes it a new start.
func TestTrackerGraphRelaunch(t *testing.T) {
	tr := newTracker()
	src := source{}
	tab := make([]byte, 2*startSize)
	putStart(tab, 0, 42, 1, 5000, 0, 0, kindGraphNode)
	tr.ingest(src, tab, tab)
	putStart(tab, 0, 42, 1, 9000, 0, 0, kindGraphNode)
	tr.ingest(src, tab, tab)
	if tr.read != 2 {
		t.Fatalf("graph relaunch: %d starts read, want 2", tr.read)
	}
}

// TestTrackerGraphTimed: a graph kernel's timed starts (kind 0xFE, taking
// the graph part of the table in turn: the same grid id at every replay)
// are each read once, resolve against the graph launch's CPU stamp, and
// go to the kernel's graph key (with --stream: per process, stream not
// known); the untimed kind 0xFF is a graph key too.
func TestTrackerGraphTimed(t *testing.T) {
	tr := newTracker()
	src := source{pid: 9}
	tab := make([]byte, (startSlots+graphSlots)*startSize)
	// replay 1: two kernels of the graph; replay 2: the first again
	putStart(tab, startSlots+0, 42, 1, 1_000_000+10_000+3_000, 10_000, 0, kindGraphWord)
	putStart(tab, startSlots+1, 43, 2, 1_000_000+10_000+8_000, 10_000, 0, kindGraphWord)
	tr.ingest(src, tab, tab)
	tr.ingest(src, tab, tab)
	putStart(tab, startSlots+2, 42, 1, 1_000_000+50_000+4_000, 50_000, 0, kindGraphWord)
	tr.ingest(src, tab, tab)
	if tr.read != 3 {
		t.Fatalf("%d starts read, want 3", tr.read)
	}
	tr.addClock(src, runtime.ClockSample{Offset: 1_000_000, Bound: 100, At: 5_000})
	tr.addClock(src, runtime.ClockSample{Offset: 1_000_000, Bound: 100, At: 90_000})
	l := &launchlate{byStream: true, cur: map[key]*stats{}}
	tr.resolve(false, 0, l.timed, l.untimed)
	want := key{kernel: 1, pid: 9, graph: true}
	s := l.cur[want]
	if s == nil || s.n != 2 || l.timedN != 3 || l.graphT != 3 || l.untimedN != 0 {
		t.Fatalf("keys %v, timed %d (graph %d), untimed %d; want 2 latencies under %+v", l.cur, l.timedN, l.graphT, l.untimedN, want)
	}
	if v, below := s.quantile(100); below || v < 3_900 || v > 4_100 {
		t.Errorf("kernel 1's largest latency %d ns, want 4000", v)
	}
	if !(start{kind: kindGraphNode}).isGraph() || (start{kind: kindRuntime | kindPending}).isGraph() {
		t.Error("isGraph")
	}
	if k := l.keyOf(src, start{kernel: 5, stream: 0x77, kind: kindRuntime}); k.graph || k.stream != 0x77 {
		t.Errorf("a stream launch keyed %+v", k)
	}
}

// TestLatencyExactAtEpochScale: where globaltimer counts Unix-epoch ns the
// clock offset is near 1.8e18, where float64 steps by 256 ns; latencies
// come out to the nanosecond all the same, interpolated or not.
func TestLatencyExactAtEpochScale(t *testing.T) {
	const off = 1_763_894_000_123_456_789 - 5_000_000_000 // GPU Unix time, CPU ~5 s of uptime
	tests := []struct {
		name   string
		c1, c2 runtime.ClockSample
		cpu    uint64
		late   uint64
		want   int64
	}{
		{"between equal offsets", runtime.ClockSample{Offset: off, At: 1_000}, runtime.ClockSample{Offset: off, At: 9_000_000_000},
			5_000_012_345, 4_321, 4_321},
		{"interpolated drift", runtime.ClockSample{Offset: off, At: 1_000_000_000}, runtime.ClockSample{Offset: off + 20_000, At: 3_000_000_000},
			2_500_000_001, 4_321 + 15_000, 4_321},
		{"after the last (final)", runtime.ClockSample{Offset: off - 7, At: 1_000}, runtime.ClockSample{Offset: off, At: 2_000},
			5_000_000_003, 987, 987},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTracker()
			src := source{pid: 1}
			tab := make([]byte, 2*startSize)
			putStart(tab, 0, 1, 0, tc.cpu+off+tc.late, tc.cpu, 0, kindRuntime)
			tr.ingest(src, tab, tab)
			tr.addClock(src, tc.c1)
			tr.addClock(src, tc.c2)
			var got []int64
			tr.resolve(true, 0, func(_ source, l latency) { got = append(got, l.ns) }, func(source, start) { t.Error("untimed") })
			if len(got) != 1 || got[0] != tc.want {
				t.Errorf("latency %v, want [%d]", got, tc.want)
			}
		})
	}
}

// TestTrackerHoldsTornSlot: a slot whose second copy differs from the
// first (the GPU was writing it) is left for the next reading, which takes
// it once both copies agree.
func TestTrackerHoldsTornSlot(t *testing.T) {
	tr := newTracker()
	src := source{pid: 3}
	tab := make([]byte, 2*startSize)
	putStart(tab, 0, 4, 1, 5000, 4000, 0x10, kindRuntime)
	again := append([]byte(nil), tab...)
	putStart(again, 0, 4, 1, 5000, 4100, 0x10, kindRuntime) // the CPU stamp landed in between
	tr.ingest(src, tab, again)
	if tr.read != 0 || tr.torn != 1 {
		t.Fatalf("torn slot: read %d, torn %d; want 0, 1", tr.read, tr.torn)
	}
	tr.ingest(src, again, again)
	if tr.read != 1 || tr.pending[src][0].cpu != 4100 {
		t.Fatalf("after agreeing copies: read %d, pending %+v; want the second version", tr.read, tr.pending[src])
	}
	// the account line says so
	a := &toolkit.Account{Tool: "launchlate"}
	(&launchlate{tr: tr}).account(a)
	if got := a.String(); !strings.Contains(got, "1 readings of a start held back") {
		t.Errorf("account %q does not show the held-back reading", got)
	}
}

// Each device's clock is calibrated on its own; the account gives each
// one's bound where there are several.
func TestBoundsByDevice(t *testing.T) {
	tr := newTracker()
	tr.addClock(source{pid: 1, dev: 0}, runtime.ClockSample{Bound: 1200, At: 1})
	if got := tr.boundsByDevice(); got != "" {
		t.Errorf("one device: %q, want nothing more", got)
	}
	tr.addClock(source{pid: 1, dev: 1}, runtime.ClockSample{Bound: 1300, At: 1})
	tr.addClock(source{pid: 1, dev: 1}, runtime.ClockSample{Bound: 900, At: 2})
	tr.addClock(source{pid: 2, dev: 0}, runtime.ClockSample{Bound: 700, At: 1})
	if got := tr.boundsByDevice(); got != ", per device: 0 1200 ns, 1 1300 ns" {
		t.Errorf("got %q", got)
	}
}

// TestStaleStartsAndClockKeep: a start no calibration comes after within
// staleAfter is counted untimed and let go, not held (a context whose
// calibrations fail); calibrations older than clockKeep before the newest
// are let go (two stay), the largest bound per device is kept.
func TestStaleStartsAndClockKeep(t *testing.T) {
	tr := newTracker()
	src := source{pid: 1}
	tab := make([]byte, 2*startSize)
	putStart(tab, 0, 1, 0, 5000, 1000, 0, kindRuntime)
	tr.ingest(src, tab, tab)
	tr.addClock(src, runtime.ClockSample{Offset: 0, Bound: 900, At: 500})
	untimed := 0
	timed := func(source, latency) { t.Error("timed without a later calibration") }
	un := func(source, start) { untimed++ }
	tr.resolve(false, 1000+uint64(staleAfter)-1, timed, un)
	if untimed != 0 || len(tr.pending[src]) != 1 {
		t.Fatalf("within staleAfter: %d untimed, %d pending; want it held", untimed, len(tr.pending[src]))
	}
	tr.resolve(false, 1000+uint64(staleAfter)+1, timed, un)
	if untimed != 1 || tr.stale != 1 || len(tr.pending[src]) != 0 {
		t.Fatalf("past staleAfter: %d untimed, %d stale, %d pending; want it counted and let go", untimed, tr.stale, len(tr.pending[src]))
	}

	for i := range 200 {
		tr.addClock(src, runtime.ClockSample{Bound: 100, At: 1000 + uint64(i)*uint64(time.Second)})
	}
	cs := tr.clocks[src]
	if first, last := cs[0].At, cs[len(cs)-1].At; last-first > uint64(clockKeep) || len(cs) < 2 || !slices.IsSortedFunc(cs, func(a, b runtime.ClockSample) int { return cmp.Compare(a.At, b.At) }) {
		t.Errorf("%d calibrations kept over %v, want at most %v's worth, in order", len(cs), time.Duration(last-first), clockKeep)
	}
	if tr.bounds[0] != 900 {
		t.Errorf("device 0's largest bound %d, want 900 (from a calibration let go)", tr.bounds[0])
	}
}

// TestForgetProcess: a gone process's contexts are let go, a start of it
// still waiting counted untimed; another process's stay.
func TestForgetProcess(t *testing.T) {
	tr := newTracker()
	a, b := source{pid: 1}, source{pid: 2}
	tab := make([]byte, 2*startSize)
	putStart(tab, 0, 1, 0, 5000, 1000, 0, kindRuntime)
	tr.ingest(a, tab, tab)
	tr.ingest(b, tab, tab)
	tr.addClock(a, runtime.ClockSample{At: 500})
	tr.addClock(b, runtime.ClockSample{At: 500})
	untimed := 0
	tr.forget(1, func(source, start) { untimed++ })
	if untimed != 1 || tr.stale != 1 || len(tr.seen[a]) != 0 || len(tr.pending[a]) != 0 || len(tr.clocks[a]) != 0 {
		t.Errorf("pid 1 forgotten: %d untimed, seen %d, pending %d, clocks %d; want its waiting start untimed, nothing kept",
			untimed, len(tr.seen[a]), len(tr.pending[a]), len(tr.clocks[a]))
	}
	if len(tr.seen[b]) == 0 || len(tr.pending[b]) != 1 || len(tr.clocks[b]) != 1 {
		t.Errorf("pid 2 lost its state when pid 1 went")
	}
}

// TestResolveJoinsGraphRuns: a swapped graph node's start carries its id
// and run index (kind LL_GRAPH_SEQ); resolve finds its graph launch's stamp
// once, times it as a graph kernel, and counts the runs it cannot join.
func TestResolveJoinsGraphRuns(t *testing.T) {
	tr := newTracker()
	src := source{pid: 4}
	var asked [][2]uint64
	tr.stampOf = func(s source, id uint32, idx uint64) (uint64, bool) {
		asked = append(asked, [2]uint64{uint64(id), idx})
		if s != src || id != 5 || idx > 1 {
			return 0, false
		}
		return 10_000 + idx*1000, true
	}
	tr.addClock(src, runtime.ClockSample{At: 5_000, Offset: 1_000_000})
	tr.addClock(src, runtime.ClockSample{At: 50_000, Offset: 1_000_000})
	tab := make([]byte, 4*startSize)
	putStart(tab, 0, 1, 2, 1_000_000+11_000+3_000, 1, 5, kindGraphSeq) // run 1 of node 5: launch at 11,000, 3 us
	putStart(tab, 1, 1, 2, 1_000_000+20_000, 9, 5, kindGraphSeq)       // run 9: no stamp
	tr.ingest(src, tab, tab)
	var lats []latency
	var un []start
	tr.resolve(false, 60_000, func(_ source, l latency) { lats = append(lats, l) }, func(_ source, s start) { un = append(un, s) })
	if len(lats) != 1 || lats[0].ns != 3_000 || !lats[0].s.isGraph() || lats[0].s.stream != 0 {
		t.Fatalf("timed %+v; want run 1 at 3 us, a graph kernel with no stream", lats)
	}
	if len(un) != 1 || !un[0].isGraph() || tr.noStamp != 1 {
		t.Fatalf("untimed %+v, noStamp %d; want run 9, counted", un, tr.noStamp)
	}
	if want := [][2]uint64{{5, 1}, {5, 9}}; !slices.Equal(asked, want) {
		t.Fatalf("asked %v, want %v (each run once)", asked, want)
	}
}
