package promexport

import (
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gpubpf/gpubpf/internal/testenv"
)

func family(t *testing.T, e *Exporter, name string) *dto.MetricFamily {
	t.Helper()
	fams, err := e.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name {
			return f
		}
	}
	return nil
}

// Past --max-series label sets a family folds new ones into "other" (the
// pid kept) and counts them; a set seen before keeps its own series; a
// process that went has its series dropped.
func TestLabelsBound(t *testing.T) {
	e := New("launchlate", 2)
	h := e.Histogram("latency_seconds", "launch to start", "pid", "kernel")
	for _, k := range []string{"gemm", "relu", "softmax", "gemm", "layernorm"} {
		h.WithLabelValues(e.Labels("latency", "7", k)...).Observe(1e-5)
	}
	f := family(t, e, "gpubpf_launchlate_latency_seconds")
	got := map[string]uint64{}
	for _, m := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "kernel" {
				got[l.GetValue()] = m.GetHistogram().GetSampleCount()
			}
		}
	}
	if len(got) != 3 || got["gemm"] != 2 || got["relu"] != 1 || got[Other] != 2 {
		t.Errorf("series %v: want gemm 2, relu 1, other 2", got)
	}
	if fo := family(t, e, "gpubpf_series_folded_total"); fo == nil || fo.GetMetric()[0].GetCounter().GetValue() != 2 {
		t.Errorf("folds counted: %v", fo)
	}
	e.Forget(7)
	if f := family(t, e, "gpubpf_launchlate_latency_seconds"); f != nil && len(f.GetMetric()) != 0 {
		t.Errorf("process 7's series stayed: %v", f)
	}
	h.WithLabelValues(e.Labels("latency", "8", "softmax")...).Observe(1e-5)
	f = family(t, e, "gpubpf_launchlate_latency_seconds")
	if f == nil || len(f.GetMetric()) != 1 || f.GetMetric()[0].GetLabel()[0].GetValue() != "softmax" {
		t.Errorf("after the fold's process went, a new set gets its own series: %v", f)
	}
}

// The endpoint serves the text format (the official parser reads it back,
// classic buckets included) and, to a scraper that asks, native histograms.
func TestServe(t *testing.T) {
	e := New("launchlate", 0)
	h := e.Histogram("latency_seconds", "launch to start", "pid", "kernel")
	for _, v := range []float64{5e-6, 6e-6, 2e-3} {
		h.WithLabelValues("7", "gemm").Observe(v)
	}
	if err := e.Serve("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	resp, err := http.Get("http://" + e.Addr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("the text format does not parse: %v\n%s", err, body)
	}
	// and Prometheus's own linter takes it (names, units, help)
	lint := exec.Command(testenv.Tool(t, "promtool"), "check", "metrics")
	lint.Stdin = strings.NewReader(string(body))
	if out, err := lint.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
	m := fams["gpubpf_launchlate_latency_seconds"]
	if m == nil || m.GetMetric()[0].GetHistogram().GetSampleCount() != 3 || len(m.GetMetric()[0].GetHistogram().GetBucket()) == 0 {
		t.Fatalf("scraped %v", m)
	}
	req, _ := http.NewRequest("GET", "http://"+e.Addr()+"/metrics", nil)
	req.Header.Set("Accept", string(expfmt.NewFormat(expfmt.TypeProtoDelim)))
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	dec := expfmt.NewDecoder(resp.Body, expfmt.ResponseFormat(resp.Header))
	for {
		var f dto.MetricFamily
		if err := dec.Decode(&f); err != nil {
			t.Fatalf("no latency family in the protobuf scrape: %v", err)
		}
		if f.GetName() == "gpubpf_launchlate_latency_seconds" {
			if hh := f.GetMetric()[0].GetHistogram(); len(hh.GetPositiveSpan()) == 0 {
				t.Errorf("no native histogram: %v", hh)
			}
			break
		}
	}
}

// Process names a traced process once: process_info{pid,comm} 1 with its
// /proc comm, the pid label for its other series; Forget drops it with
// them, and a pid seen again is named again.
func TestProcessInfo(t *testing.T) {
	e := New("launchlate", 0)
	pid := os.Getpid()
	comm := Comm(pid)
	if comm == "" {
		t.Fatal("no comm for this process")
	}
	h := e.Histogram("latency_seconds", "launch to start", "pid", "kernel")
	for range 3 {
		h.WithLabelValues(e.Process(pid), "gemm").Observe(1e-5)
	}
	info := "gpubpf_launchlate_process_info|" + comm + "|" + strconv.Itoa(pid) // labels in name order
	got, err := e.Values()
	if err != nil {
		t.Fatal(err)
	}
	if got[info] != 1 || got["gpubpf_launchlate_latency_seconds|gemm|"+strconv.Itoa(pid)] != 3 {
		t.Fatalf("values %v: want %s = 1 and 3 latencies", got, info)
	}
	e.Forget(pid)
	if got, _ := e.Values(); got[info] != 0 {
		t.Errorf("after Forget: %v", got)
	}
	e.Process(pid)
	if got, _ := e.Values(); got[info] != 1 {
		t.Errorf("seen again: %v", got)
	}
	if Comm(1<<30) != "" {
		t.Errorf("a process that does not exist has a comm")
	}
}
