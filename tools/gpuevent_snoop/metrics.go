package gpuevent_snoop

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpubpf/gpubpf/pkg/promexport"
	"github.com/gpubpf/gpubpf/pkg/toolkit"
)

// collector gives Prometheus (--prometheus, --otlp) the Tracer's totals as
// each scrape asks: nothing is added per event, so the stream's cost stays
// the tool's own. Read under the tracer's lock.
type collector struct {
	t            *Tracer
	e            *promexport.Exporter
	lock, unlock func()

	calls, errs, secs, bytes, launches, allocated, freed, live, liveSite, copies, info *prometheus.Desc
}

func newCollector(t *Tracer, e *promexport.Exporter, lock, unlock func()) *collector {
	d := func(what, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("gpubpf_gpuevent_snoop_"+what, help, labels, nil)
	}
	return &collector{t: t, e: e, lock: lock, unlock: unlock,
		calls:     d("calls_total", "CUDA calls traced, per process and API.", "pid", "api"),
		errs:      d("errors_total", "CUDA calls that returned an error, per process and API.", "pid", "api"),
		secs:      d("call_seconds_total", "Time spent in the timed calls, per process and API.", "pid", "api"),
		bytes:     d("bytes_total", "Bytes the sized calls named (allocated, freed, copied, set), per process and API.", "pid", "api"),
		launches:  d("launches_total", "Kernel launches, per process and kernel.", "pid", "kernel"),
		allocated: d("allocated_bytes_total", "Device memory allocated, per process.", "pid"),
		freed:     d("freed_bytes_total", "Device memory freed (of allocations traced), per process.", "pid"),
		live:      d("live_bytes", "Device memory allocated and not freed yet, per process.", "pid"),
		liveSite:  d("live_bytes_by_site", "Device memory allocated and not freed yet, per process and call site.", "pid", "site"),
		copies:    d("copy_bytes_total", "Bytes copied, per process and direction (H2D, D2H, D2D, ...).", "pid", "direction"),
		info:      d(promexport.ProcessInfo, promexport.ProcessInfoHelp, "pid", "comm"),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.calls, c.errs, c.secs, c.bytes, c.launches, c.allocated, c.freed, c.live, c.liveSite, c.copies, c.info} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	c.lock()
	defer c.unlock()
	m := func(d *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, t, v, labels...)
	}
	for _, p := range c.t.sortedProcs() {
		pid := strconv.FormatUint(uint64(p.pid), 10)
		// the process's name, as the other tools give it
		// (promexport.Process): with its series, gone with them
		m(c.info, prometheus.GaugeValue, 1, pid, p.comm)
		var alloc, freed uint64
		for i := range p.apis {
			s := &p.apis[i]
			if s.calls == 0 {
				continue
			}
			api := apis[i].Name
			m(c.calls, prometheus.CounterValue, float64(s.calls), pid, api)
			m(c.errs, prometheus.CounterValue, float64(s.errors), pid, api)
			m(c.secs, prometheus.CounterValue, float64(s.ns)/1e9, pid, api)
			m(c.bytes, prometheus.CounterValue, float64(s.bytes), pid, api)
			switch apis[i].Kind {
			case KindMalloc:
				alloc += s.bytes
			case KindFree:
				freed += s.bytes
			}
		}
		m(c.allocated, prometheus.CounterValue, float64(alloc), pid)
		m(c.freed, prometheus.CounterValue, float64(freed), pid)
		bySite := map[string]uint64{}
		var live uint64
		for _, a := range p.live {
			live += a.size
			bySite[c.e.Labels("site", pid, a.site)[1]] += a.size
		}
		m(c.live, prometheus.GaugeValue, float64(live), pid)
		for site, n := range bySite {
			m(c.liveSite, prometheus.GaugeValue, float64(n), pid, site)
		}
		byKernel := map[string]uint64{}
		for _, k := range p.kernels {
			byKernel[c.e.Labels("kernel", pid, toolkit.ShortName(k.name))[1]] += k.launches
		}
		for k, n := range byKernel {
			m(c.launches, prometheus.CounterValue, float64(n), pid, k)
		}
		for dir, n := range p.copyBytes {
			m(c.copies, prometheus.CounterValue, float64(n), pid, dir)
		}
	}
}
