package gpuevent_snoop

import (
	"io"
	"strings"
	"testing"

	"github.com/gpubpf/gpubpf/pkg/promexport"
)

// --prometheus: a scrape reads the tracer's own totals, the ones its
// summary and leak report print: calls, errors and bytes per API, memory
// allocated, freed and still live (by call site), bytes copied by
// direction, launches per kernel.
func TestMetricsEqualSummary(t *testing.T) {
	tr := NewTracer(io.Discard, NewResolver(), Options{Summary: true}, 0, 0)
	var e Event
	for _, r := range [][]byte{
		rawEvent(apiIndex(t, "cudaMalloc"), 0, [6]uint64{0x7ffd0000, 1 << 20}, [6]uint64{0x401400}, 0x7f0000100000),
		rawEvent(apiIndex(t, "cudaMalloc"), 0, [6]uint64{0x7ffd0000, 300}, [6]uint64{0x401400}, 0x7f0000200000),
		rawEvent(apiIndex(t, "cudaFree"), 0, [6]uint64{0x7f0000100000}, [6]uint64{0x401500}, 0),
		rawEvent(apiIndex(t, "cudaFree"), 400, [6]uint64{0xdead}, [6]uint64{0x401500}, 0),
		rawEvent(apiIndex(t, "cudaMemcpyAsync"), 0, [6]uint64{0x7f0000000000, 0x1000, 1 << 20, DirH2D, 0x77}, [6]uint64{0x401300}, 0),
		rawEvent(apiIndex(t, "cudaMemcpy"), 0, [6]uint64{0x1000, 0x7f0000000000, 4096, DirD2H}, [6]uint64{0x401600}, 0),
		rawEvent(apiIndex(t, "cudaMemcpy"), 0, [6]uint64{0x1000, 0x7f0000000000, 4096, DirD2H}, [6]uint64{0x401600}, 0),
	} {
		if err := Decode(r, &e); err != nil {
			t.Fatal(err)
		}
		tr.Handle(&e)
	}
	ex := promexport.New("gpuevent_snoop", 0)
	ex.Registry.MustRegister(newCollector(tr, ex, func() {}, func() {}))
	got, err := ex.Values("pid")
	if err != nil {
		t.Fatal(err)
	}
	leaks := tr.Leaks()
	want := map[string]float64{
		"gpubpf_gpuevent_snoop_calls_total|cudaMalloc":      2,
		"gpubpf_gpuevent_snoop_calls_total|cudaFree":        2,
		"gpubpf_gpuevent_snoop_errors_total|cudaFree":       1,
		"gpubpf_gpuevent_snoop_allocated_bytes_total":       1<<20 + 300,
		"gpubpf_gpuevent_snoop_freed_bytes_total":           1 << 20,
		"gpubpf_gpuevent_snoop_live_bytes":                  float64(leaks[0].Bytes),
		"gpubpf_gpuevent_snoop_copy_bytes_total|H2D":        1 << 20,
		"gpubpf_gpuevent_snoop_copy_bytes_total|D2H":        8192,
		"gpubpf_gpuevent_snoop_bytes_total|cudaMemcpyAsync": 1 << 20,
		"gpubpf_gpuevent_snoop_calls_total|cudaMemcpy":      2,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	var bySite float64
	for k, v := range got {
		if len(k) > len("gpubpf_gpuevent_snoop_live_bytes_by_site") && k[:len("gpubpf_gpuevent_snoop_live_bytes_by_site")] == "gpubpf_gpuevent_snoop_live_bytes_by_site" {
			bySite += v
		}
	}
	if bySite != 300 {
		t.Errorf("live bytes by site add up to %v, want 300", bySite)
	}
	// the one process named, as every tool names it
	var named float64
	for k, v := range got {
		if strings.HasPrefix(k, "gpubpf_gpuevent_snoop_"+promexport.ProcessInfo) {
			named += v
		}
	}
	if named != 1 {
		t.Errorf("process_info series add up to %v, want 1 (one process): %v", named, got)
	}
}

// While tracing, --prometheus gets the account's counted clauses as they
// stand (exported again at each refresh: the same series, new numbers).
func TestCountedAccountExported(t *testing.T) {
	tr := NewTracer(io.Discard, NewResolver(), Options{Summary: true}, 0, 0)
	att := NewAttacher(0)
	ex := promexport.New("gpuevent_snoop", 0)
	var cnt [numCounters]uint64
	cnt[cntRingbufFull], cnt[cntNested] = 3, 2
	countedAccount(tr, cnt, att).Export(ex)
	var e Event
	if err := Decode(rawEvent(apiIndex(t, "cudaMalloc"), 0, [6]uint64{0x7ffd0000, 64}, [6]uint64{0x401400}, 0x7f0000100000), &e); err != nil {
		t.Fatal(err)
	}
	tr.Handle(&e)
	cnt[cntRingbufFull] = 5
	countedAccount(tr, cnt, att).Export(ex)
	got, err := ex.Values()
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]float64{
		"gpubpf_gpuevent_snoop_account|events":              1,
		"gpubpf_gpuevent_snoop_account|dropped":             5,
		"gpubpf_gpuevent_snoop_account|nested calls folded": 2,
		"gpubpf_gpuevent_snoop_account|processes":           1,
	} {
		if got[k] != v {
			t.Errorf("%s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
}
