package promexport

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	collpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	"google.golang.org/protobuf/proto"
)

// The same instruments through the OpenTelemetry SDK (its in-memory
// reader): a native histogram arrives as an exponential histogram with the
// same count, a counter as a sum.
func TestOTLPInMemory(t *testing.T) {
	e := New("launchlate", 0)
	h := e.Histogram("latency_seconds", "launch to start", "pid", "kernel")
	for _, v := range []float64{5e-6, 6e-6, 2e-3} {
		h.WithLabelValues("7", "gemm").Observe(v)
	}
	e.Counter("untimed_total", "untimed", "pid", "kernel").WithLabelValues("7", "gemm").Add(4)
	r := sdkmetric.NewManualReader(sdkmetric.WithProducer(e.Producer()))
	sdkmetric.NewMeterProvider(sdkmetric.WithReader(r), sdkmetric.WithResource(e.Resource()))
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.ExponentialHistogram[float64]:
				if m.Name == "gpubpf_launchlate_latency_seconds" && len(d.DataPoints) == 1 && d.DataPoints[0].Count == 3 {
					found[m.Name] = true
				}
			case metricdata.Sum[float64]:
				if m.Name == "gpubpf_launchlate_untimed_total" && len(d.DataPoints) == 1 && d.DataPoints[0].Value == 4 {
					found[m.Name] = true
				}
			}
		}
	}
	if !found["gpubpf_launchlate_latency_seconds"] || !found["gpubpf_launchlate_untimed_total"] {
		t.Errorf("collected %+v", rm.ScopeMetrics)
	}
	if v, ok := rm.Resource.Set().Value("service.name"); !ok || v.AsString() != "gpubpf-launchlate" {
		t.Errorf("resource %v", rm.Resource)
	}
}

// --otlp http://...: the real exporter posts OTLP/HTTP protobuf to the
// collector's /v1/metrics, with the metrics and the resource.
func TestOTLPHTTP(t *testing.T) {
	srv, got := otlpSink(t)
	e := New("launchlate", 0)
	e.Histogram("latency_seconds", "launch to start", "pid", "kernel").WithLabelValues("7", "gemm").Observe(1e-5)
	if err := e.PushOTLP(srv.URL, time.Hour, attribute.String("gpu.name", "NVIDIA H100 80GB HBM3")); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil { // the last push
		t.Fatal(err)
	}
	select {
	case req := <-got:
		names := map[string]bool{}
		res := map[string]string{}
		for _, rm := range req.GetResourceMetrics() {
			for _, a := range rm.GetResource().GetAttributes() {
				res[a.GetKey()] = a.GetValue().GetStringValue()
			}
			for _, sm := range rm.GetScopeMetrics() {
				for _, m := range sm.GetMetrics() {
					names[m.GetName()] = true
				}
			}
		}
		if !names["gpubpf_launchlate_latency_seconds"] || res["service.name"] != "gpubpf-launchlate" || res["gpu.name"] != "NVIDIA H100 80GB HBM3" {
			t.Errorf("pushed metrics %v, resource %v", names, res)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("nothing pushed (a hang detector: the push is at Close)")
	}
}

// otlpSink is an OTLP/HTTP metrics endpoint: each request to /v1/metrics,
// decoded, on the channel; closed at the test's end.
func otlpSink(t *testing.T) (*httptest.Server, chan *collpb.ExportMetricsServiceRequest) {
	got := make(chan *collpb.ExportMetricsServiceRequest, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		req := &collpb.ExportMetricsServiceRequest{}
		if r.URL.Path == "/v1/metrics" && proto.Unmarshal(b, req) == nil {
			got <- req
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, _ := proto.Marshal(&collpb.ExportMetricsServiceResponse{})
		w.Write(out)
	}))
	t.Cleanup(srv.Close)
	return srv, got
}
