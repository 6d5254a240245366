package threadhist

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/gpubpf/gpubpf/pkg/promexport"
	"github.com/gpubpf/gpubpf/pkg/runtime"
	"github.com/gpubpf/gpubpf/pkg/toolkit"
)

func TestSummarize(t *testing.T) {
	const keys = 4
	// Kernel 0: keys 0-2 ran (key 2 idle), kernel 1 nothing, kernel 2: key 1.
	runs := []uint64{3, 3, 2, 0, 0, 0, 0, 0, 0, 5, 0, 0}
	ns := []uint64{300, 330, 100, 0, 0, 0, 0, 0, 0, 50, 0, 0}
	got := summarize(runs, ns, keys)
	if len(got) != 2 || got[0].kernel != 0 || got[1].kernel != 2 {
		t.Fatalf("kernels: %+v", got)
	}
	s := got[0]
	if s.runs != 8 || s.ns != 730 || s.minNs != 100 || s.maxNs != 330 || s.runsMin != 2 || s.runsMax != 3 {
		t.Fatalf("totals: %+v", s)
	}
	if s.keys[0].key != 1 || s.keys[2].key != 2 {
		t.Fatalf("not busiest first: %+v", s.keys)
	}
	if len(s.below) != 1 || s.below[0].key != 2 {
		t.Fatalf("below 80%% of the mean: %+v", s.below)
	}
	if got[1].runs != 5 || got[1].keys[0].key != 1 {
		t.Fatalf("kernel 2: %+v", got[1])
	}
}

func TestParseBy(t *testing.T) {
	for _, s := range []string{"thread.x", "global", "block", "warp"} {
		if b, err := parseBy(s); err != nil || b.name != s {
			t.Errorf("parseBy(%q) = %v, %v", s, b, err)
		}
	}
	if _, err := parseBy("lane"); err == nil {
		t.Error("parseBy(lane) accepted")
	}
}

func TestFold(t *testing.T) {
	// 2 kernels x 2 shards x 3 keys.
	v := []uint64{1, 2, 3, 10, 20, 30, 4, 0, 0, 0, 0, 5}
	got := fold(v, 2, 3)
	want := []uint64{11, 22, 33, 4, 0, 5}
	if len(got) != len(want) {
		t.Fatalf("%v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("fold = %v, want %v", got, want)
		}
	}
}

// --per-device: a summary per kernel and device, each with its own runs
// (device 1 ran twice as many), and "device" in its JSON; without it, one
// summary of both.
func TestPerDevice(t *testing.T) {
	byDev := map[int]map[string][]uint64{
		0: {"runs": {2, 2, 0, 0}, "nsecs": {20, 20, 0, 0}},
		1: {"runs": {4, 4, 0, 0}, "nsecs": {40, 40, 0, 0}},
	}
	name := func(uint32) string { return "_Z4workv" }
	for _, per := range []bool{false, true} {
		var out bytes.Buffer
		r := &reporter{by: byKey{name: "thread.x"}, keys: 4, shards: 1, top: 2, perDevice: per}
		r.report(toolkit.NewReport(&out, true, name, byDev))
		var got []string
		for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
			var o struct {
				Device *int
				Runs   uint64
			}
			if err := json.Unmarshal([]byte(l), &o); err != nil {
				t.Fatalf("%q: %v", l, err)
			}
			d := "all"
			if o.Device != nil {
				d = strconv.Itoa(*o.Device)
			}
			got = append(got, fmt.Sprintf("%s:%d", d, o.Runs))
		}
		want := "all:12"
		if per {
			want = "0:4 1:8"
		}
		if strings.Join(got, " ") != want {
			t.Errorf("per-device %v: %v, want %s", per, got, want)
		}
	}
}

// --prometheus: the gauges are the table's numbers, per kernel and device
// ("all" without --per-device).
func TestMetricsEqualTable(t *testing.T) {
	byDev := map[int]map[string][]uint64{
		0: {"runs": {2, 2, 0, 0}, "nsecs": {20, 10, 0, 0}},
		1: {"runs": {4, 4, 0, 0}, "nsecs": {40, 40, 0, 0}},
	}
	name := func(uint32) string { return "_Z4workv" }
	for _, per := range []bool{false, true} {
		e := promexport.New("threadhist", 0)
		r := &reporter{by: byKey{name: "thread.x"}, keys: 4, shards: 1, top: 2, perDevice: per}
		rep := toolkit.NewReport(&bytes.Buffer{}, true, name, byDev)
		rep.Exporter = e
		r.metrics(rep)
		got, err := e.Values()
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]float64{"gpubpf_threadhist_runs|all|work": 12, "gpubpf_threadhist_max_over_mean|all|work": 60.0 / 55.0}
		if per {
			want = map[string]float64{"gpubpf_threadhist_runs|0|work": 4, "gpubpf_threadhist_runs|1|work": 8,
				"gpubpf_threadhist_max_over_mean|0|work": 20.0 / 15.0, "gpubpf_threadhist_keys_below_80pct|0|work": 1}
		}
		for k, v := range want {
			if g, ok := got[k]; !ok || g < v-1e-9 || g > v+1e-9 {
				t.Errorf("per-device %v: %s = %v, want %v (got %v)", per, k, g, v, got)
			}
		}
		// the account a refresh exports after the metrics: the runs so far
		a := &toolkit.Account{Tool: "threadhist"}
		r.account(a, runtime.Stats{})
		if !strings.Contains(a.String(), "12 thread runs counted") {
			t.Errorf("account after the metrics: %q, want the 12 runs", a.String())
		}
	}
}
