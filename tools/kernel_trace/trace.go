package kernel_trace

import (
	"bufio"
	"fmt"
	"math"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/olekukonko/tablewriter"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpubpf/gpubpf/pkg/runtime"
	"github.com/gpubpf/gpubpf/pkg/toolkit"
)

// launchKey is a launch's identity: grid ids are unique per context, and
// two GPUs of one process hand out the same ones.
type launchKey struct {
	pid    int
	dev    int
	ctx    uint64 // 0: the device's primary context
	kernel uint32
	grid   uint64
}

// launch is what kernel_trace knows of one launch from its records.
type launch struct {
	key         launchKey
	threads     uint64
	first, last uint64
	smFirst     map[uint32]uint64
	smBlocks    map[uint32]map[uint64]struct{}
	// blocks: entries of smBlocks; approx: past the bounds below, blocks
	// are counted from their first thread's record (smMore) instead.
	blocks int
	approx bool
	smMore map[uint32]int
}

// Blocks per SM come from a set of each SM's blocks, which a block's any
// thread record adds to (most records may be dropped: a full ring), for the
// first maxLaunchBlocks blocks of a launch while the kept launches hold
// fewer than maxBlockEntries together (about 100 MB: a million-block grid
// kept 400 times would take gigabytes). Past either, a launch counts a
// block from its first thread's record (a dropped record leaves it out)
// and its row says "~". Variables for the tests.
var (
	maxLaunchBlocks = 1 << 16
	maxBlockEntries = 1 << 21
)

// add takes one thread's record; entries counts the kept launches' set
// entries.
func (l *launch) add(e toolkit.ThreadEvent, entries *int) {
	if l.threads == 0 || e.TS < l.first {
		l.first = e.TS
	}
	if e.TS > l.last {
		l.last = e.TS
	}
	l.threads++
	if f, ok := l.smFirst[e.SM]; !ok || e.TS < f {
		l.smFirst[e.SM] = e.TS
	}
	bid := uint64(e.BlockX) | uint64(e.BlockY)<<21 | uint64(e.BlockZ)<<42
	bs := l.smBlocks[e.SM]
	if _, ok := bs[bid]; ok {
		return
	}
	if !l.approx && (l.blocks >= maxLaunchBlocks || *entries >= maxBlockEntries) {
		l.approx = true
	}
	if l.approx {
		if e.ThreadX == 0 && e.ThreadY == 0 && e.ThreadZ == 0 {
			if l.smMore == nil {
				l.smMore = map[uint32]int{}
			}
			l.smMore[e.SM]++
		}
		return
	}
	if bs == nil {
		bs = map[uint64]struct{}{}
		l.smBlocks[e.SM] = bs
	}
	bs[bid] = struct{}{}
	l.blocks++
	*entries++
}

// summary: blocks per SM (min, max) and how long after the launch's first
// start the last SM to start did.
func (l *launch) summary() (bmin, bmax int, lastSM uint64) {
	bmin = -1
	for sm := range l.smFirst {
		n := len(l.smBlocks[sm]) + l.smMore[sm]
		if bmin < 0 || n < bmin {
			bmin = n
		}
		bmax = max(bmax, n)
		if d := l.smFirst[sm] - l.first; d > lastSM {
			lastSM = d
		}
	}
	return max(bmin, 0), bmax, lastSM
}

type kernelTotals struct {
	launches, threads uint64
}

type tracer struct {
	mu        sync.Mutex
	w         *bufio.Writer
	json      bool
	stamp     bool
	maxEvents int64
	keep      int
	sample    uint64
	printed   int64
	bad       uint64
	threads   uint64
	launches  map[launchKey]*launch
	totals    map[launchKey]*kernelTotals // by (pid, kernel), grid 0
	perKernel map[launchKey][]*launch     // the kept launches by (pid, kernel)
	now       func() time.Time
	gauges    map[string]*prometheus.GaugeVec // --prometheus
	entries   int                             // the kept launches' block-set entries (launch.add)
}

func newTracer(w *bufio.Writer, json, stamp bool, maxEvents int64, keep int) *tracer {
	return &tracer{w: w, json: json, stamp: stamp, maxEvents: maxEvents, keep: max(keep, 1),
		launches: map[launchKey]*launch{}, totals: map[launchKey]*kernelTotals{}, perKernel: map[launchKey][]*launch{}, now: time.Now}
}

func (t *tracer) batch(b *runtime.Batch) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var buf []byte
	pre := ""
	if t.stamp {
		pre = t.now().Format("15:04:05") + " "
	}
	for i := 0; i < b.Len(); i++ {
		e, err := toolkit.DecodeThreadEvent(b.Record(i))
		if err != nil {
			t.bad++
			continue
		}
		t.threads++
		t.launchOf(b.PID, b.Device, b.Ctx, e).add(e, &t.entries)
		t.totals[launchKey{pid: b.PID, kernel: e.Kernel}].threads++
		if t.maxEvents >= 0 && t.printed >= t.maxEvents {
			continue
		}
		t.printed++
		if t.json {
			buf = fmt.Appendf(buf, `{"type":"thread","pid":%d,"device":%d,"kernel_index":%d,"grid":%d,"ts":%d,"block":[%d,%d,%d],"thread":[%d,%d,%d],"sm":%d,"warp":%d,"lane":%d}`+"\n",
				b.PID, b.Device, e.Kernel, e.Grid, e.TS, e.BlockX, e.BlockY, e.BlockZ, e.ThreadX, e.ThreadY, e.ThreadZ, e.SM, e.Warp, e.Lane)
		} else {
			buf = fmt.Appendf(buf, "%s[kernel_trace] ts=%d block=(%d,%d,%d) thread=(%d,%d,%d) sm=%d warp=%d lane=%d\n",
				pre, e.TS, e.BlockX, e.BlockY, e.BlockZ, e.ThreadX, e.ThreadY, e.ThreadZ, e.SM, e.Warp, e.Lane)
		}
	}
	t.w.Write(buf)
	t.w.Flush()
}

// launchOf finds or starts the launch of e, retiring the oldest kept
// launch of its kernel into the totals when more than 4x --launches are kept.
func (t *tracer) launchOf(pid, dev int, ctx uint64, e toolkit.ThreadEvent) *launch {
	k := launchKey{pid: pid, dev: dev, ctx: ctx, kernel: e.Kernel, grid: e.Grid}
	if l := t.launches[k]; l != nil {
		return l
	}
	l := &launch{key: k, smFirst: map[uint32]uint64{}, smBlocks: map[uint32]map[uint64]struct{}{}}
	t.launches[k] = l
	kk := launchKey{pid: pid, kernel: e.Kernel}
	tot := t.totals[kk]
	if tot == nil {
		tot = &kernelTotals{}
		t.totals[kk] = tot
	}
	tot.launches++
	ls := append(t.perKernel[kk], l)
	if len(ls) > 4*t.keep {
		sort.Slice(ls, func(i, j int) bool { return ls[i].first < ls[j].first })
		for _, old := range ls[:len(ls)-t.keep] {
			delete(t.launches, old.key)
			t.entries -= old.blocks
		}
		ls = append([]*launch(nil), ls[len(ls)-t.keep:]...)
	}
	t.perKernel[kk] = ls
	return l
}

// report prints the per-launch summaries (the kept launches of each
// kernel), then forgets them with -i.
func (t *tracer) report(rep *toolkit.Report) {
	t.mu.Lock()
	defer t.mu.Unlock()
	kks := make([]launchKey, 0, len(t.perKernel))
	for kk := range t.perKernel {
		kks = append(kks, kk)
	}
	sort.Slice(kks, func(i, j int) bool {
		if kks[i].pid != kks[j].pid {
			return kks[i].pid < kks[j].pid
		}
		return kks[i].kernel < kks[j].kernel
	})
	for _, kk := range kks {
		ls := t.perKernel[kk]
		sort.Slice(ls, func(i, j int) bool { return ls[i].first < ls[j].first })
		if len(ls) > t.keep {
			ls = ls[len(ls)-t.keep:]
		}
		base, mangled := rep.Kernel(kk.kernel)
		tot := t.totals[kk]
		if t.json {
			for _, l := range ls {
				bmin, bmax, lastSM := l.summary()
				b := fmt.Appendf(nil, `{"type":"launch","pid":%d,"device":%d,`, kk.pid, l.key.dev)
				if l.key.ctx != 0 {
					b = fmt.Appendf(b, `"context":"0x%x",`, l.key.ctx)
				}
				b = append(b, `"kernel":`...)
				b = toolkit.AppendJSONString(b, base)
				b = append(b, `,"mangled":`...)
				b = toolkit.AppendJSONString(b, mangled)
				b = fmt.Appendf(b, `,"grid":%d,"threads":%d,"first_start":%d,"last_start":%d,"start_spread_ns":%d,"sms":%d,"blocks_per_sm_min":%d,"blocks_per_sm_max":%d,"blocks_from_first_threads":%t,"last_sm_late_ns":%d}`+"\n",
					l.key.grid, l.threads, l.first, l.last, l.last-l.first, len(l.smFirst), bmin, bmax, l.approx, lastSM)
				t.w.Write(b)
			}
			continue
		}
		fmt.Fprintf(t.w, "\n%s%s (PID %d): %d launches, %d threads traced", rep.Prefix(), base, kk.pid, tot.launches, tot.threads)
		if t.sample > 1 {
			fmt.Fprintf(t.w, " (one in %d)", t.sample)
		}
		fmt.Fprintf(t.w, "; the last %d:\n", len(ls))
		tb := tablewriter.NewTable(t.w)
		tb.Header("DEV", "GRID", "THREADS", "FIRST START", "START SPREAD", "SMS", "BLOCKS/SM", "LAST SM STARTED")
		for _, l := range ls {
			bmin, bmax, lastSM := l.summary()
			bps := strconv.Itoa(bmin)
			if bmax != bmin {
				bps += "-" + strconv.Itoa(bmax)
			}
			if l.approx {
				bps = "~" + bps
			}
			dev := strconv.Itoa(l.key.dev)
			if l.key.ctx != 0 {
				dev += fmt.Sprintf(" (ctx 0x%x)", l.key.ctx)
			}
			tb.Append(dev, strconv.FormatUint(l.key.grid, 10), strconv.FormatUint(l.threads, 10), gpuTime(l.first),
				toolkit.FormatNs(l.last-l.first), strconv.Itoa(len(l.smFirst)), bps, "+"+toolkit.FormatNs(lastSM))
		}
		tb.Render()
	}
	t.w.Flush()
	if rep.Interval && !rep.Final {
		t.perKernel = map[launchKey][]*launch{}
		t.launches = map[launchKey]*launch{}
		t.totals = map[launchKey]*kernelTotals{}
		t.entries = 0
	}
}

// metrics sets, per process and kernel, the launches and threads traced
// and the last launch's start spread (--prometheus, --otlp).
func (t *tracer) metrics(rep *toolkit.Report) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := rep.Exporter
	if t.gauges == nil {
		t.gauges = e.Gauges([]string{"pid", "kernel"}, map[string][2]string{
			"launches": {"launches", "Launches traced (their threads' entries received), per process and kernel."},
			"threads":  {"threads", "Thread entries received, per process and kernel."},
			"spread":   {"last_start_spread_seconds", "The last launch's start spread: its last thread's start after its first's."},
			"sms":      {"last_sms", "SMs the last launch's threads started on."},
		})
	}
	for kk, tot := range t.totals {
		base, _ := rep.Kernel(kk.kernel)
		lv := e.Labels("kernel", e.Process(kk.pid), toolkit.ShortName(base))
		t.gauges["launches"].WithLabelValues(lv...).Set(float64(tot.launches))
		t.gauges["threads"].WithLabelValues(lv...).Set(float64(tot.threads))
		var last *launch
		for _, l := range t.perKernel[kk] {
			if last == nil || l.first > last.first {
				last = l
			}
		}
		if last != nil {
			t.gauges["spread"].WithLabelValues(lv...).Set(float64(last.last-last.first) / 1e9)
			t.gauges["sms"].WithLabelValues(lv...).Set(float64(len(last.smFirst)))
		}
	}
}

func (t *tracer) account(a *toolkit.Account, _ runtime.Stats) {
	t.mu.Lock()
	defer t.mu.Unlock()
	a.Add(t.threads, "thread entries received", "")
	if t.maxEvents >= 0 && int64(t.threads) > t.printed {
		a.Note(fmt.Sprintf("%d printed (--max-events %d)", t.printed, t.maxEvents))
	}
	if t.bad > 0 {
		a.Add(t.bad, "malformed records", "")
	}
}

// gpuTime shows a launch's first start, a %globaltimer value: the time of
// day to the microsecond where the GPU's timer counts from the Unix epoch
// (NVIDIA's drivers set it so: the H100s and H200s read 2026), else the
// raw nanoseconds. -j keeps the nanoseconds (first_start).
func gpuTime(ns uint64) string {
	const y2001 = 1_000_000_000 * 1_000_000_000 // ns of 2001-09-09 UTC
	if ns < y2001 || ns > math.MaxInt64 {
		return strconv.FormatUint(ns, 10)
	}
	return time.Unix(0, int64(ns)).Format("15:04:05.000000")
}
