package launchlate

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gpubpf/gpubpf/pkg/runtime"
	"github.com/gpubpf/gpubpf/pkg/toolkit"
)

// TestKernelTimes: CUPTI's records time the kernels no probe times (latency
// = GPU start - launch call, run time = end - start), count those without a
// stamp as untimed, give probed kernels only their run times (and, with
// --timing both, a cupti line beside the probe's), keep graph kernels
// apart, and leave the agent's own kernels out.
func TestKernelTimes(t *testing.T) {
	for _, timing := range []string{timingAuto, timingBoth} {
		t.Run(timing, func(t *testing.T) {
			var out bytes.Buffer
			idx := map[string]uint32{}
			var names []string
			l := &launchlate{w: &out, cur: map[key]*stats{}, events: true, ev: eventFormat{json: true}, cupti: true, timing: timing,
				nameOf: func(i uint32) string { return names[i] },
				indexOf: func(n string) uint32 {
					if i, ok := idx[n]; ok {
						return i
					}
					idx[n] = uint32(len(names))
					names = append(names, n)
					return idx[n]
				},
				instrumented: func(n string) bool { return n == "_Z6probedPf" }}
			recs := []runtime.KernelTime{
				{PID: 7, Kernel: "sm90_xmma_gemm", CPU: 1_000, Start: 6_000, End: 86_000, Grid: 11, Stream: 0x50},
				{PID: 7, Kernel: "sm90_xmma_gemm", CPU: 2_000, Start: 90_000, End: 170_000, Grid: 12, Stream: 0x50},
				{PID: 7, Kernel: "sm90_xmma_gemm", CPU: 0, Start: 200_000, End: 280_000, Grid: 13},
				{PID: 7, Kernel: "_Z6probedPf", CPU: 3_000, Start: 4_000, End: 9_000, Grid: 14},
				{PID: 7, Kernel: "triton_poi_fused_relu_0", CPU: 5_000, Start: 12_000, End: 13_000, Grid: 15, Graph: 3},
				{PID: 7, Kernel: "gpubpf_clock", CPU: 0, Start: 1, End: 2, Grid: 16},
			}
			l.addKernelTimes(recs)
			l.flushEvents()
			gemm := l.cur[key{kernel: idx["sm90_xmma_gemm"]}]
			if gemm == nil || gemm.n != 2 || gemm.cupti != 2 || gemm.untimed != 1 || gemm.dur.TotalCount() != 3 {
				t.Fatalf("gemm stats %+v", gemm)
			}
			if p50, _ := gemm.quantile(50); p50 < 5_000 || p50 > 5_010 {
				t.Errorf("gemm p50 latency %d, want 5000 (start 6000 - call 1000)", p50)
			}
			if d50 := gemm.durs().p50; d50 < 80_000 || d50 > 80_100 {
				t.Errorf("gemm p50 run time %d, want 80000", d50)
			}
			probed := l.cur[key{kernel: idx["_Z6probedPf"]}]
			if probed == nil || probed.n != 0 || probed.untimed != 0 || probed.dur.TotalCount() != 1 {
				t.Errorf("a probed kernel's record must give only its run time: %+v", probed)
			}
			if g := l.cur[key{kernel: idx["triton_poi_fused_relu_0"], graph: true}]; g == nil || g.n != 1 {
				t.Errorf("graph kernel not kept apart: %v", l.cur)
			}
			if _, ok := idx["gpubpf_clock"]; ok {
				t.Errorf("the agent's own kernel was counted")
			}
			if l.timedN != 3 || l.ktTimed != 3 || l.ktUntimed != 1 || l.untimedN != 1 || l.graphT != 1 {
				t.Errorf("counts: timed %d (cupti %d), untimed %d (cupti %d), graph %d", l.timedN, l.ktTimed, l.untimedN, l.ktUntimed, l.graphT)
			}
			var sources []string
			for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
				var o struct {
					Mangled string
					Source  string
					Dur     uint64 `json:"duration_ns"`
					Latency int64  `json:"latency_ns"`
				}
				if err := json.Unmarshal([]byte(line), &o); err != nil {
					t.Fatalf("%q: %v", line, err)
				}
				if o.Dur == 0 {
					t.Errorf("a CUPTI line without its run time: %s", line)
				}
				sources = append(sources, o.Mangled+"/"+o.Source)
			}
			want := 3
			if timing == timingBoth {
				want = 4 // and the probed launch's CUPTI line
			}
			if len(sources) != want {
				t.Errorf("--events lines %v, want %d", sources, want)
			}
		})
	}
}

// -k applies to CUPTI's records too: they come for every kernel.
func TestKernelTimesPatterns(t *testing.T) {
	names := []string{}
	l := &launchlate{w: &bytes.Buffer{}, cur: map[key]*stats{}, cupti: true, timing: timingAuto, patterns: []string{"sm90_*"},
		nameOf:       func(i uint32) string { return names[i] },
		indexOf:      func(n string) uint32 { names = append(names, n); return uint32(len(names) - 1) },
		instrumented: func(string) bool { return false }}
	l.addKernelTimes([]runtime.KernelTime{
		{PID: 1, Kernel: "sm90_xmma_gemm", CPU: 1, Start: 5, End: 9, Grid: 1},
		{PID: 1, Kernel: "triton_poi_fused_relu_0", CPU: 1, Start: 5, End: 9, Grid: 2},
	})
	if l.ktTimed != 1 || len(names) != 1 || names[0] != "sm90_xmma_gemm" {
		t.Errorf("timed %d, kernels %v: want only sm90_xmma_gemm", l.ktTimed, names)
	}
}

// TestStreamUnknown: with --stream, a CUPTI-timed launch whose stream the
// record of its call does not name (CUPTI's API records) is kept under an
// "unknown" stream, never the default stream's.
func TestStreamUnknown(t *testing.T) {
	l := &launchlate{w: &bytes.Buffer{}, cur: map[key]*stats{}, cupti: true, timing: timingAuto, byStream: true,
		nameOf: func(uint32) string { return "gemm" }, indexOf: func(string) uint32 { return 0 },
		instrumented: func(string) bool { return false }}
	l.addKernelTimes([]runtime.KernelTime{
		{PID: 7, Kernel: "gemm", CPU: 1_000, Start: 6_000, End: 9_000, Grid: 1, StreamUnknown: true},
		{PID: 7, Kernel: "gemm", CPU: 2_000, Start: 7_000, End: 9_000, Grid: 2, Stream: 0},
	})
	unknown, def := l.cur[key{pid: 7, stream: streamUnknown}], l.cur[key{pid: 7, stream: 0}]
	if unknown == nil || unknown.n != 1 || def == nil || def.n != 1 {
		t.Fatalf("stats %v: want one launch on an unknown stream, one on the default stream", l.cur)
	}
	if got := l.label(key{pid: 7, stream: streamUnknown}); got != "gemm [pid 7, stream unknown]" {
		t.Errorf("label %q", got)
	}
}

// A process attached while it ran (-p) had launches before CUPTI came on:
// the account says how long after the attach that was, the summary gives it
// in ns, and a program started under the tool has no such line.
func TestCUPTILateAfterAttach(t *testing.T) {
	var out bytes.Buffer
	l := &launchlate{w: &out, cur: map[key]*stats{}, cupti: true, tr: newTracker()}
	st := runtime.Stats{KernelTimesFrom: map[int]string{7: "libcupti.so.13 (CUPTI 130001)", 8: "libcupti.so.13 (CUPTI 130001)"},
		KernelTimesRecords: map[int]uint64{7: 10, 8: 10}, KernelTimesLate: map[int]time.Duration{7: 41 * time.Millisecond}}
	var a toolkit.Account
	l.ktAccount(&a, st)
	got := a.String()
	if !strings.Contains(got, "process 7: CUPTI came on 41.00 ms after the attach; kernels without PTX launched before that are not counted") {
		t.Errorf("account %q: want process 7's late start said", got)
	}
	if strings.Contains(got, "process 8: CUPTI came on") {
		t.Errorf("account %q: process 8 was started under the tool", got)
	}
	l.summaryJSON(st)
	if !strings.Contains(out.String(), `"cupti_late_ns":{"7":41000000}`) {
		t.Errorf("summary %s: want cupti_late_ns for process 7", out.String())
	}
}

// The summary line and -j give p99.9 beside p50, p90, p99 and max (CLI.md:
// HDR percentiles where latency is measured), for the latencies and for
// CUPTI's run times.
func TestPercentilesP999(t *testing.T) {
	for _, js := range []bool{false, true} {
		var out bytes.Buffer
		names := []string{"sm90_xmma_gemm"}
		l := &launchlate{w: &out, cur: map[key]*stats{}, cupti: true, timing: timingAuto, json: js,
			nameOf: func(i uint32) string { return names[i] }, indexOf: func(string) uint32 { return 0 },
			instrumented: func(string) bool { return false }}
		// latencies 1..2000 us, run times 1..2000 us: p99.9 about 1998-2000 us
		var recs []runtime.KernelTime
		for i := uint64(1); i <= 2000; i++ {
			recs = append(recs, runtime.KernelTime{PID: 7, Kernel: "sm90_xmma_gemm", CPU: 1_000_000_000, Start: 1_000_000_000 + i*1000,
				End: 1_000_000_000 + i*2000, Grid: i})
		}
		l.addKernelTimes(recs)
		l.report(true)
		got := out.String()
		if js {
			var o struct {
				P99  uint64 `json:"p99_ns"`
				P999 uint64 `json:"p999_ns"`
				Max  uint64 `json:"max_ns"`
				D999 uint64 `json:"dur_p999_ns"`
			}
			if err := json.Unmarshal([]byte(strings.TrimSpace(got)), &o); err != nil {
				t.Fatalf("%q: %v", got, err)
			}
			if o.P999 < 1_990_000 || o.P999 > o.Max || o.P999 < o.P99 || o.D999 < 1_990_000 {
				t.Errorf("-j: p99 %d, p99.9 %d, max %d, run p99.9 %d: want p99.9 about 1998-2000 us", o.P99, o.P999, o.Max, o.D999)
			}
			continue
		}
		if !strings.Contains(got, ", p99 1.98 ms, p99.9 2.00 ms, max 2.00 ms (timed by CUPTI)") || !strings.Contains(got, "run time: 2000 kernels, p50 ") ||
			!strings.Contains(got, ", p99 1.98 ms, p99.9 2.00 ms, max 2.00 ms (CUPTI)") {
			t.Errorf("text:\n%s\nwant p99.9 in the latency and run time lines", got)
		}
	}
}
