package kernelretsnoop

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/gpubpf/gpubpf/pkg/promexport"
	"github.com/gpubpf/gpubpf/pkg/runtime"
	"github.com/gpubpf/gpubpf/pkg/toolkit"
)

// TestLateLaneMarked: lanes 0-30 exit with their warp, lane 31 ~750 ns
// later: lane 31 is marked and no other; with every lane on time, none.
func TestLateLaneMarked(t *testing.T) {
	const nb = toolkit.LinLogBuckets
	lane := make([]uint64, 2*32*nb) // two kernels
	spread := make([]uint64, 2*shards*nb)
	// kernel 0: 100 warps on time, all 32 lanes exiting together (only in
	// the spread, from two shards)
	spread[3*nb+0] = 60 * 32
	spread[7*nb+2] = 40 * 32
	// kernel 1: 100 split warps, lane 31 ~750 ns late (bucket 59)
	for l := 0; l < 32; l++ {
		if l == 31 {
			lane[(32+l)*nb+59] = 100
		} else {
			lane[(32+l)*nb+0] = 100
		}
	}
	spread[(shards+5)*nb+0] = 3100
	spread[(shards+5)*nb+59] = 100
	got := summarize(lane, spread)
	if len(got) != 2 {
		t.Fatalf("%d kernels", len(got))
	}
	if got[0].exits != 3200 || len(got[0].late) != 0 {
		t.Errorf("kernel 0: late lanes %v", got[0].late)
	}
	if len(got[1].late) != 1 || got[1].late[0] != 31 {
		t.Errorf("kernel 1: late lanes %v, want [31]", got[1].late)
	}
	if v := got[1].lanes[31].p50; v < 700 || v > 800 {
		t.Errorf("lane 31 median %d ns", v)
	}
	if got[1].exits != 3200 || got[1].spreadMax == 0 {
		t.Errorf("kernel 1: %+v", got[1])
	}
}

// TestOnTimeWarps: warps that exited as one are the spread's exits less the
// lane table's, 0 ns late on every lane; a lane table read ahead of the
// spread (while kernels run) counts none rather than wrap.
func TestOnTimeWarps(t *testing.T) {
	const nb = toolkit.LinLogBuckets
	lane := make([]uint64, 32*nb)
	spread := make([]uint64, shards*nb)
	for l := 0; l < 32; l++ {
		lane[l*nb+10] = 4 // 4 split warps, every lane 10 ns late
	}
	spread[9*nb+10] = 4*32 + 50*32 // and 50 on time
	got := summarize(lane, spread)
	if len(got) != 1 || got[0].exits != 54*32 || got[0].lanes[5].exits != 54 || got[0].lanes[5].p50 != 0 {
		t.Fatalf("got %+v, want 54 exits per lane, median 0", got)
	}
	spread[9*nb+10] = 3 * 32 // lagging the lane table
	if got := summarize(lane, spread); got[0].exits != 4*32 {
		t.Fatalf("lagging spread: %d exits, want the lane table's %d", got[0].exits, 4*32)
	}
}

// --per-device: a summary per kernel and device, "device" in its JSON.
func TestPerDevice(t *testing.T) {
	byDev := map[int]map[string][]uint64{}
	for d, n := range map[int]uint64{0: 3, 1: 7} {
		const nb = toolkit.LinLogBuckets
		lane := make([]uint64, 32*nb)
		spread := make([]uint64, shards*nb)
		lane[0] = n   // lane 0's exits, on time
		spread[0] = n // and in the launch spread
		byDev[d] = map[string][]uint64{"lanehist": lane, "spreadhist": spread}
	}
	var out bytes.Buffer
	r := &reporter{perDevice: true}
	r.report(toolkit.NewReport(&out, true, func(uint32) string { return "_Z4workv" }, byDev))
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var o struct {
			Device *int
			Exits  uint64
		}
		if err := json.Unmarshal([]byte(l), &o); err != nil || o.Device == nil {
			t.Fatalf("%q: %v (want a device)", l, err)
		}
		got = append(got, fmt.Sprintf("%d:%d", *o.Device, o.Exits))
	}
	if strings.Join(got, " ") != "0:3 1:7" {
		t.Errorf("per device %v, want 0:3 1:7", got)
	}
	if r.exits != 10 {
		t.Errorf("exits %d over both devices, want 10", r.exits)
	}
}

// --prometheus: per kernel and device, the exits of the summary.
func TestMetrics(t *testing.T) {
	const nb = toolkit.LinLogBuckets
	lane := make([]uint64, 32*nb)
	spread := make([]uint64, shards*nb)
	lane[0], spread[0] = 5, 5
	e := promexport.New("kernelretsnoop", 0)
	rep := toolkit.NewReport(&bytes.Buffer{}, true, func(uint32) string { return "_Z4workv" },
		map[int]map[string][]uint64{0: {"lanehist": lane, "spreadhist": spread}})
	rep.Exporter = e
	r := &reporter{}
	r.metrics(rep)
	// the account a refresh exports after the metrics: the exits so far
	a := &toolkit.Account{Tool: "kernelretsnoop"}
	r.account(a, runtime.Stats{})
	if !strings.Contains(a.String(), "5 thread exits counted") {
		t.Errorf("account after the metrics: %q, want the 5 exits", a.String())
	}
	fams, err := e.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == "gpubpf_kernelretsnoop_exits" {
			if m := f.GetMetric()[0]; m.GetGauge().GetValue() != 5 || m.GetLabel()[0].GetValue() != "all" {
				t.Errorf("exits %v", m)
			}
			return
		}
	}
	t.Errorf("no exits gauge in %v", fams)
}
