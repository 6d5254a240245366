package kernel_trace

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpubpf/gpubpf/pkg/promexport"
	"github.com/gpubpf/gpubpf/pkg/runtime"
	"github.com/gpubpf/gpubpf/pkg/toolkit"
)

func TestParseRange(t *testing.T) {
	for _, c := range []struct {
		in     string
		lo, hi uint64
		ok     bool
	}{{"", 0, ^uint64(0), true}, {"3", 3, 3, true}, {"0-31", 0, 31, true}, {"5-2", 0, 0, false}, {"x", 0, 0, false}, {"1-", 0, 0, false}} {
		lo, hi, err := parseRange("block", c.in)
		if (err == nil) != c.ok || c.ok && (lo != c.lo || hi != c.hi) {
			t.Errorf("parseRange(%q) = %d, %d, %v", c.in, lo, hi, err)
		}
	}
}

func rec(ts uint64, grid uint64, bx, tx, sm uint32) []byte {
	b := make([]byte, 56)
	binary.LittleEndian.PutUint64(b, ts)
	binary.LittleEndian.PutUint64(b[8:], grid)
	binary.LittleEndian.PutUint32(b[16:], bx)
	binary.LittleEndian.PutUint32(b[28:], tx)
	binary.LittleEndian.PutUint32(b[40:], sm)
	return b
}

// TestLaunchSummary: two blocks on SM 0 and one on SM 1 starting 300 ns
// later: 3 blocks, blocks per SM 1-2, last SM +300 ns, spread 400 ns.
func TestLaunchSummary(t *testing.T) {
	l := &launch{smFirst: map[uint32]uint64{}, smBlocks: map[uint32]map[uint64]struct{}{}}
	for _, r := range [][]byte{rec(1000, 7, 0, 0, 0), rec(1100, 7, 1, 0, 0), rec(1300, 7, 2, 0, 1), rec(1400, 7, 2, 1, 1)} {
		e, _ := toolkit.DecodeThreadEvent(r)
		l.add(e, new(int))
	}
	bmin, bmax, lastSM := l.summary()
	if l.threads != 4 || l.last-l.first != 400 || bmin != 1 || bmax != 2 || lastSM != 300 {
		t.Fatalf("threads %d spread %d blocks/SM %d-%d last SM %d", l.threads, l.last-l.first, bmin, bmax, lastSM)
	}
}

// TestLaunchBlocksBounded: past maxLaunchBlocks blocks in its set, a
// launch counts a block from its first thread's record only, and its row
// says so; the kept launches' entries are counted.
func TestLaunchBlocksBounded(t *testing.T) {
	old := maxLaunchBlocks
	maxLaunchBlocks = 2
	defer func() { maxLaunchBlocks = old }()
	l := &launch{smFirst: map[uint32]uint64{}, smBlocks: map[uint32]map[uint64]struct{}{}}
	entries := 0
	// blocks 0, 1 (sets), then 2 and 3 on SM 0 from their thread 0, block 4
	// from another thread only: not counted
	for _, r := range [][]byte{rec(1000, 0, 0, 5, 0), rec(1001, 0, 1, 5, 0), rec(1002, 0, 1, 0, 0), rec(1003, 0, 2, 0, 0),
		rec(1004, 0, 3, 0, 0), rec(1005, 0, 3, 7, 0), rec(1006, 0, 4, 9, 0)} {
		e, _ := toolkit.DecodeThreadEvent(r)
		l.add(e, &entries)
	}
	bmin, bmax, _ := l.summary()
	if !l.approx || entries != 2 || bmin != 4 || bmax != 4 {
		t.Fatalf("approx %v, entries %d, blocks/SM %d-%d; want approximate, 2 entries, 4 blocks", l.approx, entries, bmin, bmax)
	}
}

// TestLaunchIdentity: two GPUs of one process hand out the same grid ids,
// and so do two contexts of one GPU: a launch is (process, device, context,
// grid id), never a mix (issue 45: 2,048 + 4,096 threads were one row), and
// every thread record says its device.
func TestLaunchIdentity(t *testing.T) {
	var out bytes.Buffer
	w := bufio.NewWriter(&out)
	tr := newTracer(w, true, false, -1, 10)
	tr.batch(runtime.NewBatch(7, 0, 0, "events", rec(1000, 5, 0, 0, 0), rec(1010, 5, 0, 1, 0)))
	tr.batch(runtime.NewBatch(7, 1, 0, "events", rec(2000, 5, 0, 0, 3), rec(2010, 5, 0, 1, 3), rec(2020, 5, 1, 0, 4)))
	tr.batch(runtime.NewBatch(7, 1, 0xabc, "events", rec(3000, 5, 0, 0, 0)))
	want := map[launchKey]uint64{{pid: 7, dev: 0, grid: 5}: 2, {pid: 7, dev: 1, grid: 5}: 3, {pid: 7, dev: 1, ctx: 0xabc, grid: 5}: 1}
	got := map[launchKey]uint64{}
	for k, l := range tr.launches {
		got[k] = l.threads
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("launches %v, want %v", got, want)
	}
	if tot := tr.totals[launchKey{pid: 7}]; tot == nil || tot.launches != 3 || tot.threads != 6 {
		t.Errorf("totals %+v: want 3 launches, 6 threads", tot)
	}
	devs := map[int]int{}
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var r struct {
			Type   string
			Device *int
		}
		if err := json.Unmarshal([]byte(l), &r); err != nil || r.Type != "thread" || r.Device == nil {
			t.Fatalf("%q: %v (want a thread record with its device)", l, err)
		}
		devs[*r.Device]++
	}
	if devs[0] != 2 || devs[1] != 4 {
		t.Errorf("thread records by device %v, want 2 on 0, 4 on 1", devs)
	}
}

// --prometheus: per process and kernel, the launches and threads the table
// counts, and the last launch's start spread.
func TestMetrics(t *testing.T) {
	tr := newTracer(bufio.NewWriter(&bytes.Buffer{}), true, false, 0, 10)
	tr.batch(runtime.NewBatch(7, 0, 0, "events", rec(1000, 5, 0, 0, 0), rec(1010, 5, 0, 1, 0)))
	tr.batch(runtime.NewBatch(7, 1, 0, "events", rec(2000, 6, 0, 0, 3), rec(2400, 6, 0, 1, 4)))
	e := promexport.New("kernel_trace", 0)
	rep := toolkit.NewReport(&bytes.Buffer{}, true, func(uint32) string { return "_Z4workv" }, nil)
	rep.Exporter = e
	tr.metrics(rep)
	got, err := e.Values("pid", "kernel")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"gpubpf_kernel_trace_launches": 2, "gpubpf_kernel_trace_threads": 4,
		"gpubpf_kernel_trace_last_start_spread_seconds": 400e-9, "gpubpf_kernel_trace_last_sms": 2}
	for k, v := range want {
		if g := got[k]; g < v*0.999 || g > v*1.001 {
			t.Errorf("%s = %v, want %v", k, g, v)
		}
	}
}

// FIRST START reads as a time of day (the GPU timer counts from the Unix
// epoch), to the microsecond; a timer that does not is shown raw.
func TestGPUTime(t *testing.T) {
	const ns = 1795859492771085792 // an H200's %globaltimer, 2026-11-28
	if got, want := gpuTime(ns), time.Unix(0, ns).Format("15:04:05.000000"); got != want || !strings.HasSuffix(got, ":32.771085") {
		t.Errorf("gpuTime(%d) = %q, want %q", uint64(ns), got, want)
	}
	if got := gpuTime(123456789); got != "123456789" {
		t.Errorf("a timer from boot: %q, want the raw ns", got)
	}
}
