// Package promexport serves a tool's numbers to Prometheus (--prometheus
// ADDR) with the official client library: a scrape endpoint at
// ADDR/metrics, histograms as native histograms (with classic buckets too,
// for scrapers that ask for text), and a bound on label cardinality: past
// --max-series label sets a metric family folds new ones into one "other"
// series, and counts them (gpubpf_series_folded_total), so a program with
// ten thousand kernels cannot grow a fleet's metrics store without bound.
//
// Names are gpubpf_TOOL_WHAT_UNIT; every series of a process has its pid as
// a label, so series can be dropped when the process goes (Forget), and
// gpubpf_TOOL_process_info{pid,comm} names the process (Process).
package promexport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// Other is the label value a folded series takes (every label but pid).
const Other = "other"

// Exporter is one tool's endpoint.
type Exporter struct {
	Registry *prometheus.Registry
	tool     string
	srv      *http.Server
	ln       net.Listener

	mu        sync.Mutex
	maxSeries int
	seen      map[string]map[string]bool // family -> label sets admitted
	folded    *prometheus.CounterVec
	vecs      []deleter
	named     map[string]prometheus.Collector // what -> its family, registered once
	mp        *sdkmetric.MeterProvider        // PushOTLP's
	procs     map[int]bool                    // processes with a process_info series
}

type deleter interface {
	DeletePartialMatch(prometheus.Labels) int
}

// New returns an exporter for tool with at most maxSeries label sets per
// metric family (0: 1000), not serving yet (Serve).
func New(tool string, maxSeries int) *Exporter {
	if maxSeries <= 0 {
		maxSeries = 1000
	}
	e := &Exporter{Registry: prometheus.NewRegistry(), tool: tool, maxSeries: maxSeries, seen: map[string]map[string]bool{},
		named: map[string]prometheus.Collector{}}
	e.folded = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gpubpf_series_folded_total",
		Help: "Label sets folded into the \"other\" series of a metric family past --max-series.",
	}, []string{"tool", "family"})
	e.Registry.MustRegister(e.folded)
	return e
}

// Serve listens on addr (HOST:PORT, ":9400") and serves /metrics until
// Close.
func (e *Exporter) Serve(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--prometheus %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(e.Registry, promhttp.HandlerOpts{Registry: e.Registry}))
	e.ln = ln
	e.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go e.srv.Serve(ln)
	return nil
}

// Addr is where it serves (useful with port 0).
func (e *Exporter) Addr() string {
	if e.ln == nil {
		return ""
	}
	return e.ln.Addr().String()
}

// Close stops serving, and pushes the last numbers to OTLP.
func (e *Exporter) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var errs []error
	if e.mp != nil {
		if err := e.mp.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("the last OTLP push: %w", err))
		}
	}
	if e.srv != nil {
		if err := e.srv.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (e *Exporter) name(what string) string { return "gpubpf_" + e.tool + "_" + what }

// Histogram registers a histogram in seconds (what: "latency_seconds"):
// native, and with classic buckets from 1 us to 10 s.
func (e *Exporter) Histogram(what, help string, labels ...string) *prometheus.HistogramVec {
	if v, ok := e.registered(what).(*prometheus.HistogramVec); ok {
		return v
	}
	v := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:                            e.name(what),
		Help:                            help,
		Buckets:                         prometheus.ExponentialBuckets(1e-6, 4, 12),
		NativeHistogramBucketFactor:     1.1,
		NativeHistogramMaxBucketNumber:  160,
		NativeHistogramMinResetDuration: time.Hour,
	}, labels)
	e.register(what, v)
	return v
}

// Counter registers a counter (what ends in _total).
func (e *Exporter) Counter(what, help string, labels ...string) *prometheus.CounterVec {
	if v, ok := e.registered(what).(*prometheus.CounterVec); ok {
		return v
	}
	v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: e.name(what), Help: help}, labels)
	e.register(what, v)
	return v
}

// Gauge registers a gauge.
func (e *Exporter) Gauge(what, help string, labels ...string) *prometheus.GaugeVec {
	if v, ok := e.registered(what).(*prometheus.GaugeVec); ok {
		return v
	}
	v := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: e.name(what), Help: help}, labels)
	e.register(what, v)
	return v
}

// registered returns the family what was registered as, nil if none: a
// family asked for again (the account, set at every refresh) is the same
// family, where registering it twice would panic.
func (e *Exporter) registered(what string) prometheus.Collector {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.named[what]
}

func (e *Exporter) register(what string, v interface {
	prometheus.Collector
	deleter
}) {
	e.Registry.MustRegister(v)
	e.mu.Lock()
	e.vecs = append(e.vecs, v)
	e.named[what] = v
	e.mu.Unlock()
}

// Labels returns the label values a series of family takes: values as
// given while the family has fewer than max-series label sets, else (for
// a set not seen before) every value but the first (the pid, or the
// device: labels of few values) replaced by Other, and the fold counted.
func (e *Exporter) Labels(family string, values ...string) []string {
	key := strings.Join(values, "\x00")
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.seen[family]
	if s == nil {
		s = map[string]bool{}
		e.seen[family] = s
	}
	if s[key] {
		return values
	}
	if len(s) < e.maxSeries {
		s[key] = true
		return values
	}
	e.folded.WithLabelValues(e.tool, family).Inc()
	out := make([]string, len(values))
	for i, v := range values {
		if i == 0 {
			out[i] = v
		} else {
			out[i] = Other
		}
	}
	return out
}

// Gauges registers gauges with the same labels, by short name: what ->
// {what, help}.
func (e *Exporter) Gauges(labels []string, specs map[string][2]string) map[string]*prometheus.GaugeVec {
	out := make(map[string]*prometheus.GaugeVec, len(specs))
	for k, sp := range specs {
		out[k] = e.Gauge(sp[0], sp[1], labels...)
	}
	return out
}

// Values flattens what the registry holds now into name|label|label... ->
// value (a histogram's sample count, a counter's or gauge's value; labels
// in name order, those named in skip left out; series that share a key
// add up): for tests and checks.
func (e *Exporter) Values(skip ...string) (map[string]float64, error) {
	fams, err := e.Registry.Gather()
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			k := f.GetName()
			for _, l := range m.GetLabel() {
				if !slices.Contains(skip, l.GetName()) {
					k += "|" + l.GetValue()
				}
			}
			switch {
			case m.GetHistogram() != nil:
				out[k] += float64(m.GetHistogram().GetSampleCount())
			case m.GetCounter() != nil:
				out[k] += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				out[k] += m.GetGauge().GetValue()
			}
		}
	}
	return out, nil
}

// ProcessInfo names the info family of the traced processes:
// gpubpf_TOOL_process_info{pid,comm} 1. The other series carry the pid
// alone; a dashboard joins the process's name in by it (Prometheus'
// info-metric pattern, rather than comm on every series), e.g.
//
//	rate(gpubpf_launchlate_latency_seconds_count[5m]) * on(pid) group_left(comm) gpubpf_launchlate_process_info
const ProcessInfo = "process_info"

// ProcessInfoHelp is ProcessInfo's help text.
const ProcessInfoHelp = "A process the tool traces: its pid and command name (comm), value 1; join other series on pid for the name."

// Process is the pid label of process pid; the first time, it also sets
// pid's ProcessInfo series (comm from /proc/PID/comm). Forget drops it.
func (e *Exporter) Process(pid int) string {
	p := strconv.Itoa(pid)
	e.mu.Lock()
	known := e.procs[pid]
	if !known {
		if e.procs == nil {
			e.procs = map[int]bool{}
		}
		e.procs[pid] = true
	}
	e.mu.Unlock()
	if !known {
		e.Gauge(ProcessInfo, ProcessInfoHelp, "pid", "comm").WithLabelValues(p, Comm(pid)).Set(1)
	}
	return p
}

// Comm is process pid's command name ("" once it is gone).
func Comm(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// Forget drops every series of process pid (it exited): labels "pid", and
// the label sets admitted under it (families whose first label is the pid,
// as Labels takes them).
func (e *Exporter) Forget(pid int) {
	p := fmt.Sprint(pid)
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.procs, pid)
	for _, v := range e.vecs {
		v.DeletePartialMatch(prometheus.Labels{"pid": p})
	}
	for fam, s := range e.seen {
		for k := range s {
			if strings.HasPrefix(k, p+"\x00") || k == p {
				delete(s, k)
			}
		}
		e.seen[fam] = s
	}
}
