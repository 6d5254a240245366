package launchlate

import (
	"context"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpubpf/gpubpf/pkg/promexport"
	"github.com/gpubpf/gpubpf/pkg/toolkit"
)

// metrics are launchlate's numbers for Prometheus (--prometheus): the same
// launches the tables count, as they are resolved.
type metrics struct {
	e        *promexport.Exporter
	latency  *prometheus.HistogramVec // pid, kernel, source
	duration *prometheus.HistogramVec // pid, kernel
	untimed  *prometheus.CounterVec   // pid, kernel
	bound    *prometheus.GaugeVec     // pid, device
}

func newMetrics(e *promexport.Exporter) *metrics {
	return &metrics{e: e,
		latency: e.Histogram("latency_seconds", "Time from the CPU's launch call to the kernel's start on the GPU, per process and kernel; source: the GPU probe, or CUPTI's records for kernels without PTX.",
			"pid", "kernel", "source"),
		duration: e.Histogram("duration_seconds", "Kernel run time on the GPU (CUPTI's records), per process and kernel.", "pid", "kernel"),
		untimed:  e.Counter("untimed_total", "Kernel starts counted but not timed (no CPU stamp for the launch), per process and kernel.", "pid", "kernel"),
		bound:    e.Gauge("clock_bound_seconds", "Error bound of the latest GPU clock calibration, per process and device.", "pid", "device"),
	}
}

func (m *metrics) observeLatency(pid int, kernel string, cupti bool, ns int64) {
	src := "probe"
	if cupti {
		src = "cupti"
	}
	m.latency.WithLabelValues(m.e.Labels("latency", m.e.Process(pid), kernel, src)...).Observe(float64(max(ns, 0)) / 1e9)
}

func (m *metrics) observeDuration(pid int, kernel string, ns uint64) {
	m.duration.WithLabelValues(m.e.Labels("duration", m.e.Process(pid), kernel)...).Observe(float64(ns) / 1e9)
}

func (m *metrics) addUntimed(pid int, kernel string) {
	m.untimed.WithLabelValues(m.e.Labels("untimed", m.e.Process(pid), kernel)...).Inc()
}

func (m *metrics) setBound(pid, dev int, ns uint64) {
	m.bound.WithLabelValues(m.e.Process(pid), strconv.Itoa(dev)).Set(float64(ns) / 1e9)
}

// metricName is a kernel's label: its demangled name shortened as the
// table shortens it, with graph kernels apart.
func (l *launchlate) metricName(k uint32, graph bool) string {
	n := l.eventName(k).base
	if graph {
		n += " (in a CUDA graph)"
	}
	return toolkit.ShortName(n)
}

// forgetAfter: a process that exited keeps its series this long (its last
// starts and CUPTI records are taken in the next readings, a scrape or two
// sees its final numbers), then they go: --all runs for days while
// processes come and go.
const forgetAfter = 30 * time.Second

// forgetGone drops the series of each process that exited, and what the
// tracker keeps of its contexts (a table of 640 KB each), forgetAfter
// later, until ctx ends (a timer that fires after the trace ended finds the
// last push made and the endpoint closed).
func (l *launchlate) forgetGone(ctx context.Context, gone <-chan int) {
	for {
		select {
		case <-ctx.Done():
			return
		case pid := <-gone:
			time.AfterFunc(forgetAfter, func() {
				if ctx.Err() != nil {
					return
				}
				if l.prom != nil {
					l.prom.e.Forget(pid)
				}
				l.mu.Lock()
				l.tr.forget(pid, l.untimed)
				for src := range l.graphSeen {
					if src.pid == pid {
						delete(l.graphSeen, src)
					}
				}
				l.mu.Unlock()
			})
		}
	}
}
