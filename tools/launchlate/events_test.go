package launchlate

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gpubpf/gpubpf/pkg/runtime"
)

// TestLaunchJSON: each launch object is valid JSON with the fields --help
// documents; gpu_ns is cpu_ns + latency_ns, the latency keeps its sign,
// and the stream is named as the kernel lines name it.
func TestLaunchJSON(t *testing.T) {
	const cpu = 5_000_000_000
	tests := []struct {
		name          string
		s             start
		ns            int64
		bound         uint64
		base, mangled string
		wantStream    string
		wantGraph     bool
		dur           uint64
		cupti         bool
	}{
		{"stream handle", start{grid: 17, stream: 0x7f00dead0, kind: kindRuntime}, 4200, 600, "idleTick", "_Z8idleTickPj", "0x7f00dead0", false, 0, false},
		{"default stream", start{grid: 18, stream: 0, kind: kindDriver}, 350_000, 600, "queuedTick", "_Z10queuedTickPj", "default", false, 0, false},
		{"per-thread default", start{grid: 19, stream: 2, kind: kindRuntime}, 9000, 600, "k", "k", "per-thread default", false, 0, false},
		{"graph kernel", start{grid: 1 << 40, kind: kindGraphWord}, 7000, 600, "graphTick", "_Z9graphTickPj", "graph", true, 0, false},
		{"below the bound, negative", start{grid: 20, stream: 0x10, kind: kindRuntime}, -250, 800, "idleTick", "_Z8idleTickPj", "0x10", false, 0, false},
		{"name to escape", start{grid: 21, kind: kindRuntime}, 1000, 600, `a"b\c`, "", "default", false, 0, false},
		{"from CUPTI, with its run time", start{grid: 22, stream: 0x30, kind: kindDriver}, 5100, 0, "ampere_sgemm", "ampere_sgemm", "0x30", false, 81_000, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.s.cpu = cpu
			e := launchEvent{src: source{pid: 4242, dev: 1}, lat: latency{s: tc.s, ns: tc.ns, bound: tc.bound, dur: tc.dur, cupti: tc.cupti}}
			line := eventFormat{json: true}.appendLaunch(nil, e, tc.base, tc.mangled)
			if !bytes.HasSuffix(line, []byte("}\n")) || bytes.Count(line, []byte("\n")) != 1 {
				t.Fatalf("not one JSON line: %q", line)
			}
			var got struct {
				Type    string `json:"type"`
				PID     int    `json:"pid"`
				Device  int    `json:"device"`
				Kernel  string `json:"kernel"`
				Mangled string `json:"mangled"`
				Stream  string `json:"stream"`
				Graph   bool   `json:"graph"`
				Grid    uint64 `json:"grid"`
				CPU     int64  `json:"cpu_ns"`
				GPU     int64  `json:"gpu_ns"`
				Latency int64  `json:"latency_ns"`
				Bound   uint64 `json:"bound_ns"`
				Source  string `json:"source"`
				Dur     uint64 `json:"duration_ns"`
			}
			dec := json.NewDecoder(bytes.NewReader(line))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&got); err != nil {
				t.Fatalf("%q: %v", line, err)
			}
			if got.Type != "launch" || got.PID != 4242 || got.Device != 1 || got.Kernel != tc.base || got.Mangled != tc.mangled ||
				got.Stream != tc.wantStream || got.Graph != tc.wantGraph || got.Grid != tc.s.grid {
				t.Errorf("decoded %+v from %q", got, line)
			}
			if wantSrc := map[bool]string{false: "probe", true: "cupti"}[tc.cupti]; got.Source != wantSrc || got.Dur != tc.dur {
				t.Errorf("source %q duration %d, want %q %d", got.Source, got.Dur, wantSrc, tc.dur)
			}
			if got.CPU != cpu || got.Latency != tc.ns || got.GPU != cpu+tc.ns || got.Bound != tc.bound {
				t.Errorf("times: cpu %d gpu %d latency %d bound %d; want %d, %d, %d, %d", got.CPU, got.GPU, got.Latency, got.Bound,
					cpu, cpu+tc.ns, tc.ns, tc.bound)
			}
		})
	}
	// The exact bytes of one, so a field renamed or reordered is seen.
	e := launchEvent{src: source{pid: 7}, lat: latency{s: start{grid: 3, cpu: 100, stream: 0x20, kind: kindRuntime}, ns: 50, bound: 10}}
	want := `{"type":"launch","pid":7,"device":0,"kernel":"k","mangled":"_Z1kv","stream":"0x20","graph":false,"grid":3,"cpu_ns":100,"gpu_ns":150,"latency_ns":50,"bound_ns":10,"source":"probe"}` + "\n"
	if got := string(eventFormat{json: true}.appendLaunch(nil, e, "k", "_Z1kv")); got != want {
		t.Errorf("got  %s want %s", got, want)
	}
}

// TestLaunchText: the header and lines line up column for column, TIME(s)
// counts from the trace's start (never negative), -T adds the launch's
// wall-clock time, -m switches LAT to milliseconds, and a latency the
// clocks cannot tell from zero shows as "<bound" in one token.
func TestLaunchText(t *testing.T) {
	const t0 = 10_000_000_000
	wall := time.Date(2026, 11, 23, 10, 52, 0, 0, time.Local).UnixNano() - t0
	tests := []struct {
		name   string
		f      eventFormat
		s      start
		ns     int64
		bound  uint64
		dur    uint64
		header []string
		fields []string // the line split on blanks
	}{
		{"plain", eventFormat{t0: t0}, start{cpu: t0 + 1_500_000_000, stream: 0xabc, kind: kindRuntime}, 412_345, 700, 0,
			[]string{"TIME(s)", "PID", "DEV", "LAT(us)", "STREAM", "KERNEL"},
			[]string{"1.500000", "4242", "0", "412.3", "0xabc", "queuedTick"}},
		{"below the bound", eventFormat{t0: t0}, start{cpu: t0 + 2_000, kind: kindRuntime}, 300, 800, 0,
			nil, []string{"0.000002", "4242", "0", "<0.8", "default", "queuedTick"}},
		{"below the bound, rounded up", eventFormat{t0: t0}, start{cpu: t0, kind: kindRuntime}, -90, 610, 0,
			nil, []string{"0.000000", "4242", "0", "<0.7", "default", "queuedTick"}},
		{"graph", eventFormat{t0: t0}, start{cpu: t0 + 3_000_000, kind: kindGraphWord}, 5_000, 800, 0,
			nil, []string{"0.003000", "4242", "0", "5.0", "graph", "queuedTick"}},
		{"stamped before the trace", eventFormat{t0: t0}, start{cpu: t0 - 5_000, stream: 2, kind: kindRuntime}, 9_000, 800, 0,
			nil, []string{"0.000000", "4242", "0", "9.0", "per-thread", "default", "queuedTick"}},
		{"-m", eventFormat{t0: t0, ms: true}, start{cpu: t0 + 1, kind: kindRuntime}, 412_345, 700, 0,
			[]string{"TIME(s)", "PID", "DEV", "LAT(ms)", "STREAM", "KERNEL"},
			[]string{"0.000000", "4242", "0", "0.412", "default", "queuedTick"}},
		{"-T", eventFormat{t0: t0, stamp: true, wall: wall}, start{cpu: t0 + 61_000_000_000, kind: kindRuntime}, 4_000, 700, 0,
			[]string{"TIME", "TIME(s)", "PID", "DEV", "LAT(us)", "STREAM", "KERNEL"},
			[]string{"10:53:01", "61.000000", "4242", "0", "4.0", "default", "queuedTick"}},
		{"run time (CUPTI)", eventFormat{t0: t0, dur: true}, start{cpu: t0 + 1_000, stream: 0x30, kind: kindDriver}, 5_100, 0, 81_250,
			[]string{"TIME(s)", "PID", "DEV", "LAT(us)", "DUR(us)", "STREAM", "KERNEL"},
			[]string{"0.000001", "4242", "0", "5.1", "81.2", "0x30", "queuedTick"}},
		{"no run time yet", eventFormat{t0: t0, dur: true}, start{cpu: t0 + 1_000, kind: kindDriver}, 5_100, 700, 0,
			nil, []string{"0.000001", "4242", "0", "5.1", "-", "default", "queuedTick"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := tc.f.header()
			if tc.header != nil && strings.Join(strings.Fields(h), " ") != strings.Join(tc.header, " ") {
				t.Errorf("header %q, want columns %v", h, tc.header)
			}
			e := launchEvent{src: source{pid: 4242}, lat: latency{s: tc.s, ns: tc.ns, bound: tc.bound, dur: tc.dur}}
			line := string(tc.f.appendLaunch(nil, e, "queuedTick", "_Z10queuedTickPj"))
			if !strings.HasSuffix(line, "\n") || strings.Count(line, "\n") != 1 {
				t.Fatalf("not one line: %q", line)
			}
			if got := strings.Fields(line); strings.Join(got, " ") != strings.Join(tc.fields, " ") {
				t.Errorf("line %q, want fields %v", line, tc.fields)
			}
			// Each column starts where its header does.
			for _, col := range []string{"PID", "DEV", "STREAM", "KERNEL"} {
				at := strings.Index(h, col+" ")
				if col == "KERNEL" {
					at = strings.Index(h, col)
				}
				if at <= 0 || line[at-1] != ' ' || line[at] == ' ' {
					t.Errorf("column %s (at %d) not aligned:\n%s%s", col, at, h, line)
				}
			}
		})
	}
}

// TestEventsBatch: through the tracker, --events prints each timed launch
// once, a batch in launch-call order whatever the table's slot order,
// leaves starts without a CPU stamp out (still counted), and leaves the
// per-kernel statistics as they were.
func TestEventsBatch(t *testing.T) {
	var out bytes.Buffer
	names := map[uint32]string{0: "_Z8idleTickPj", 1: "_Z9graphTickPj"}
	lookups := 0
	l := &launchlate{w: &out, cur: map[key]*stats{}, events: true, ev: eventFormat{json: true},
		nameOf: func(i uint32) string { lookups++; return names[i] }}
	tr := newTracker()
	src := source{pid: 9}
	tab := make([]byte, (startSlots+graphSlots)*startSize)
	const off = 1_000_000
	// Slot order is not launch order: grid 5 (slot 5) was launched last.
	putStart(tab, 5, 5, 0, 30_000+off+4_000, 30_000, 0x40, kindRuntime)
	putStart(tab, 6, 6, 0, 10_000+off+3_000, 10_000, 0x40, kindRuntime)
	putStart(tab, 7, 7, 0, 99, 0, 0x40, kindDriver) // no CPU stamp
	putStart(tab, startSlots, 42, 1, 20_000+off+5_000, 20_000, 0, kindGraphWord)
	tr.ingest(src, tab, tab)
	tr.addClock(src, runtime.ClockSample{Offset: off, Bound: 100, At: 1_000})
	tr.addClock(src, runtime.ClockSample{Offset: off, Bound: 100, At: 90_000})
	tr.resolve(false, 0, l.timed, l.untimed)
	l.flushEvents()

	var grids []uint64
	var kernels []string
	for _, line := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
		var o struct {
			Type    string
			Grid    uint64
			Mangled string
			Latency int64 `json:"latency_ns"`
		}
		if err := json.Unmarshal([]byte(line), &o); err != nil || o.Type != "launch" {
			t.Fatalf("line %q: %v", line, err)
		}
		grids = append(grids, o.Grid)
		kernels = append(kernels, o.Mangled)
	}
	if len(grids) != 3 || grids[0] != 6 || grids[1] != 42 || grids[2] != 5 {
		t.Fatalf("printed grids %v, want [6 42 5] (launch-call order, the untimed start left out)", grids)
	}
	if kernels[1] != "_Z9graphTickPj" || kernels[0] != "_Z8idleTickPj" || kernels[2] != "_Z8idleTickPj" {
		t.Errorf("kernels printed as %v", kernels)
	}
	if lookups != 2 {
		t.Errorf("%d name lookups for 2 kernels: names not kept", lookups)
	}
	if l.timedN != 3 || l.untimedN != 1 || l.cur[key{kernel: 0}].n != 2 || l.cur[key{kernel: 0}].untimed != 1 || l.cur[key{kernel: 1, graph: true}].n != 1 {
		t.Errorf("statistics changed: timed %d, untimed %d, keys %v", l.timedN, l.untimedN, l.cur)
	}
	out.Reset()
	tr.ingest(src, tab, tab)
	tr.resolve(false, 0, l.timed, l.untimed)
	l.flushEvents()
	if out.Len() != 0 {
		t.Errorf("printed again: %q", out.String())
	}
	// Without --events nothing is held back for printing.
	l2 := &launchlate{w: &out, cur: map[key]*stats{}}
	l2.timed(src, latency{s: start{cpu: 1}, ns: 5})
	if len(l2.batch) != 0 {
		t.Errorf("batch kept without --events: %d", len(l2.batch))
	}
}
