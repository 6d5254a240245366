package promexport

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	collpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"

	"github.com/gpubpf/gpubpf/internal/testenv"
)

// collector builds the project's minimal OpenTelemetry Collector
// (internal/otelcol: the collector's own OTLP receiver and OTLP/HTTP
// exporter, a Go module of its own) into dir.
func collector(t *testing.T, dir string) string {
	t.Helper()
	_, self, _, _ := goruntime.Caller(0)
	src := filepath.Join(filepath.Dir(self), "..", "..", "internal", "otelcol")
	bin := filepath.Join(dir, "otelcol")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the OpenTelemetry Collector (internal/otelcol; its modules come from the Go module proxy): %v\n%s", err, out)
	}
	return bin
}

// The tools' --otlp through a real OpenTelemetry Collector, over OTLP/HTTP
// and OTLP/gRPC: the collector's OTLP receiver takes what the exporter
// pushes, and its OTLP/HTTP exporter passes it on to a sink here, where
// the histogram arrives as an exponential histogram with every count, the
// counter as a monotonic sum, with the tool's resource.
func TestOTLPCollector(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the OpenTelemetry Collector")
	}
	dir := t.TempDir()
	bin := collector(t, dir)

	srv, sink := otlpSink(t)

	httpPort, grpcPort := testenv.FreePort(t), testenv.FreePort(t)
	cfg := filepath.Join(dir, "otelcol.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`receivers:
  otlp:
    protocols:
      http: {endpoint: "127.0.0.1:%d"}
      grpc: {endpoint: "127.0.0.1:%d"}
exporters:
  otlphttp:
    endpoint: %q
    compression: none
    retry_on_failure: {enabled: false}
    sending_queue: {enabled: false}
service:
  telemetry:
    metrics: {level: none}
    logs: {level: warn}
  pipelines:
    metrics: {receivers: [otlp], exporters: [otlphttp]}
`, httpPort, grpcPort, srv.URL)), 0o644)
	var log bytes.Buffer
	col := exec.Command(bin, "--config", "file:"+cfg)
	col.Stdout, col.Stderr = &log, &log
	if err := col.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- col.Wait() }()
	defer func() {
		col.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("collector's log:\n%s", log.String())
		}
	}()
	for _, port := range []int{httpPort, grpcPort} {
		up := false
		for deadline := time.Now().Add(20 * time.Second); !up && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			select {
			case err := <-exited:
				exited <- err
				t.Fatalf("the collector exited: %v", err)
			default:
			}
			if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
				c.Close()
				up = true
			}
		}
		if !up {
			t.Fatalf("the collector did not listen on %d within 20 s", port)
		}
	}

	for _, tc := range []struct{ proto, endpoint string }{
		{"http", fmt.Sprintf("http://127.0.0.1:%d", httpPort)},
		{"grpc", fmt.Sprintf("grpc://127.0.0.1:%d", grpcPort)},
	} {
		t.Run(tc.proto, func(t *testing.T) {
			e := New("launchlate", 0)
			h := e.Histogram("latency_seconds", "launch to start", "pid", "kernel")
			for _, v := range []float64{5e-6, 6e-6, 2e-3} {
				h.WithLabelValues("7", "gemm").Observe(v)
			}
			e.Counter("untimed_total", "untimed", "pid", "kernel").WithLabelValues("7", "gemm").Add(4)
			if err := e.PushOTLP(tc.endpoint, time.Hour, attribute.String("gpu.name", "NVIDIA H200 via "+tc.proto)); err != nil {
				t.Fatal(err)
			}
			if err := e.Close(); err != nil { // the last push
				t.Fatal(err)
			}
			deadline := time.After(20 * time.Second)
			for {
				select {
				case req := <-sink:
					if got := check(req, "NVIDIA H200 via "+tc.proto); got == "" {
						return
					} else {
						t.Logf("a request that is not this push's (%s)", got)
					}
				case <-deadline:
					t.Fatal("the collector passed nothing on within 20 s")
				}
			}
		})
	}
}

// check: "" when req carries the test's metrics with the resource whose
// gpu.name is gpu, else what differs.
func check(req *collpb.ExportMetricsServiceRequest, gpu string) string {
	var why []string
	for _, rm := range req.GetResourceMetrics() {
		res := map[string]string{}
		for _, a := range rm.GetResource().GetAttributes() {
			res[a.GetKey()] = a.GetValue().GetStringValue()
		}
		if res["gpu.name"] != gpu {
			why = append(why, "resource "+res["gpu.name"])
			continue
		}
		if res["service.name"] != "gpubpf-launchlate" {
			return fmt.Sprintf("service.name %q", res["service.name"])
		}
		var hist, sum bool
		for _, sm := range rm.GetScopeMetrics() {
			for _, m := range sm.GetMetrics() {
				switch d := m.GetData().(type) {
				case *metricspb.Metric_ExponentialHistogram:
					if m.GetName() == "gpubpf_launchlate_latency_seconds" && len(d.ExponentialHistogram.GetDataPoints()) == 1 {
						p := d.ExponentialHistogram.GetDataPoints()[0]
						hist = p.GetCount() == 3 && p.GetSum() > 2e-3 && p.GetSum() < 2.02e-3
					}
				case *metricspb.Metric_Sum:
					if m.GetName() == "gpubpf_launchlate_untimed_total" && len(d.Sum.GetDataPoints()) == 1 {
						sum = d.Sum.GetIsMonotonic() && d.Sum.GetDataPoints()[0].GetAsDouble() == 4
					}
				}
			}
		}
		if !hist || !sum {
			return fmt.Sprintf("histogram right %v, counter right %v in %v", hist, sum, rm.GetScopeMetrics())
		}
		return ""
	}
	return strings.Join(why, "; ")
}
