package launchlate

import (
	"bytes"
	"testing"

	"github.com/gpubpf/gpubpf/pkg/promexport"
	"github.com/gpubpf/gpubpf/pkg/runtime"
)

// --prometheus: the scrape's numbers are the table's, for the same
// launches: per kernel, the latency histogram holds the timed launches
// (probe and CUPTI apart), the untimed counter the untimed ones, the run
// time histogram CUPTI's records; and each device's clock bound.
func TestPrometheusEqualsTable(t *testing.T) {
	names := []string{"_Z8idleTickPj", "sm90_xmma_gemm"}
	l := &launchlate{w: &bytes.Buffer{}, cur: map[key]*stats{}, cupti: true, timing: timingAuto,
		nameOf: func(i uint32) string { return names[i] },
		indexOf: func(n string) uint32 {
			for i, x := range names {
				if x == n {
					return uint32(i)
				}
			}
			t.Fatalf("unknown kernel %s", n)
			return 0
		},
		instrumented: func(n string) bool { return n == "_Z8idleTickPj" },
		prom:         newMetrics(promexport.New("launchlate", 0))}
	// the probe's starts: two timed, one without a stamp
	tr := newTracker()
	src := source{pid: 9}
	tab := make([]byte, (startSlots+graphSlots)*startSize)
	putStart(tab, 5, 5, 0, 30_000+1_000_000+4_000, 30_000, 0x40, kindRuntime)
	putStart(tab, 6, 6, 0, 10_000+1_000_000+3_000, 10_000, 0x40, kindRuntime)
	putStart(tab, 7, 7, 0, 99, 0, 0x40, kindDriver)
	tr.ingest(src, tab, tab)
	tr.addClock(src, runtime.ClockSample{Offset: 1_000_000, Bound: 100, At: 1_000})
	tr.addClock(src, runtime.ClockSample{Offset: 1_000_000, Bound: 100, At: 90_000})
	tr.resolve(false, 0, l.timed, l.untimed)
	// CUPTI's records: three of the gemm (one without a stamp), one of the
	// probed kernel (its run time only)
	l.addKernelTimes([]runtime.KernelTime{
		{PID: 9, Kernel: "sm90_xmma_gemm", CPU: 1_000, Start: 6_000, End: 86_000, Grid: 11},
		{PID: 9, Kernel: "sm90_xmma_gemm", CPU: 2_000, Start: 90_000, End: 170_000, Grid: 12},
		{PID: 9, Kernel: "sm90_xmma_gemm", Start: 200_000, End: 280_000, Grid: 13},
		{PID: 9, Kernel: "_Z8idleTickPj", CPU: 3_000, Start: 4_000, End: 9_000, Grid: 5},
	})
	got, err := l.prom.e.Values("pid")
	if err != nil {
		t.Fatal(err)
	}
	idle, gemm := l.cur[key{kernel: 0}], l.cur[key{kernel: 1}]
	want := map[string]float64{
		"gpubpf_launchlate_latency_seconds|idleTick|probe":       float64(idle.n),
		"gpubpf_launchlate_untimed_total|idleTick":               float64(idle.untimed),
		"gpubpf_launchlate_latency_seconds|sm90_xmma_gemm|cupti": float64(gemm.n),
		"gpubpf_launchlate_untimed_total|sm90_xmma_gemm":         float64(gemm.untimed),
		"gpubpf_launchlate_duration_seconds|sm90_xmma_gemm":      float64(gemm.dur.TotalCount()),
		"gpubpf_launchlate_duration_seconds|idleTick":            float64(idle.dur.TotalCount()),
	}
	if idle.n != 2 || idle.untimed != 1 || gemm.n != 2 || gemm.untimed != 1 {
		t.Fatalf("the table: idle %d+%d, gemm %d+%d", idle.n, idle.untimed, gemm.n, gemm.untimed)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, the table says %v (scrape: %v)", k, got[k], v, got)
		}
	}
}
