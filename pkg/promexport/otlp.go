package promexport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	prombridge "go.opentelemetry.io/contrib/bridges/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
)

// Producer hands the registry's metrics to the OpenTelemetry SDK (the
// contrib bridge): the same instruments feed the scrape endpoint and OTLP
// (native histograms become exponential histograms).
func (e *Exporter) Producer() sdkmetric.Producer {
	return prombridge.NewMetricProducer(prombridge.WithGatherer(e.Registry))
}

// Resource describes where the numbers come from: the host, the tool (as
// the service) and its process, and attrs (e.g. the GPUs' names).
func (e *Exporter) Resource(attrs ...attribute.KeyValue) *resource.Resource {
	host, _ := os.Hostname()
	base := []attribute.KeyValue{
		attribute.String("service.name", "gpubpf-"+e.tool),
		attribute.String("host.name", host),
		attribute.Int("process.pid", os.Getpid()),
	}
	return resource.NewSchemaless(append(base, attrs...)...)
}

// CheckOTLPEndpoint says what is wrong with an --otlp endpoint (nil: it is
// one PushOTLP takes): grpc://HOST:PORT or HOST:PORT, http(s)://HOST:PORT[/PATH].
func CheckOTLPEndpoint(endpoint string) error {
	hostPort := strings.TrimPrefix(endpoint, "grpc://")
	if u, err := url.Parse(endpoint); err == nil && (u.Scheme == "http" || u.Scheme == "https") {
		hostPort = u.Host
	} else if i := strings.Index(hostPort, "://"); i >= 0 {
		return fmt.Errorf("scheme %q: want grpc://HOST:PORT (or HOST:PORT) for OTLP/gRPC, http://HOST:PORT for OTLP/HTTP", hostPort[:i])
	}
	host, port, err := net.SplitHostPort(hostPort)
	if n, perr := strconv.Atoi(port); err != nil || host == "" || perr != nil || n < 1 || n > 65535 {
		return errors.New("want grpc://HOST:PORT (or HOST:PORT) for OTLP/gRPC, http://HOST:PORT for OTLP/HTTP (a collector listens on 4317 and 4318)")
	}
	return nil
}

// PushOTLP sends the metrics to an OpenTelemetry collector every interval
// (--otlp ENDPOINT): grpc://HOST:PORT (or HOST:PORT) for OTLP/gRPC,
// http(s)://HOST:PORT[/PATH] for OTLP/HTTP. Close pushes once more and
// stops.
func (e *Exporter) PushOTLP(endpoint string, every time.Duration, attrs ...attribute.KeyValue) error {
	if err := CheckOTLPEndpoint(endpoint); err != nil {
		return fmt.Errorf("--otlp %s: %w", endpoint, err)
	}
	ctx := context.Background()
	var exp sdkmetric.Exporter
	var err error
	u, perr := url.Parse(endpoint)
	switch {
	case perr == nil && (u.Scheme == "http" || u.Scheme == "https"):
		opts := []otlpmetrichttp.Option{otlpmetrichttp.WithEndpoint(u.Host)}
		if u.Scheme == "http" {
			opts = append(opts, otlpmetrichttp.WithInsecure())
		}
		if p := strings.TrimRight(u.Path, "/"); p != "" {
			opts = append(opts, otlpmetrichttp.WithURLPath(p))
		}
		exp, err = otlpmetrichttp.New(ctx, opts...)
	default:
		hostPort := strings.TrimPrefix(endpoint, "grpc://")
		exp, err = otlpmetricgrpc.New(ctx, otlpmetricgrpc.WithEndpoint(hostPort), otlpmetricgrpc.WithInsecure())
	}
	if err != nil {
		return fmt.Errorf("--otlp %s: %w", endpoint, err)
	}
	reader := sdkmetric.NewPeriodicReader(exp, sdkmetric.WithInterval(every), sdkmetric.WithProducer(e.Producer()))
	e.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader), sdkmetric.WithResource(e.Resource(attrs...)))
	return nil
}
