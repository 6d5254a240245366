package kernelretsnoop

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/olekukonko/tablewriter"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpubpf/gpubpf/pkg/runtime"
	"github.com/gpubpf/gpubpf/pkg/toolkit"
)

// lateFloorNs: a lane is marked late only if its median lateness is at
// least this (globaltimer ticks in steps of tens of ns on some GPUs) and
// at least lateFactor times the median lane's.
const (
	lateFloorNs = 100
	lateFactor  = 4
)

type laneStat struct {
	exits    uint64
	p50, p99 uint64
	late     bool
}

type kernelSummary struct {
	kernel                          uint32
	exits                           uint64
	spreadP50, spreadP99, spreadMax uint64
	lanes                           [32]laneStat
	late                            []int
}

// shards is SHARDS of kernelretsnoop.bpf.c: the launch spread every warp
// adds to is spread over SMs.
const shards = 32

// summarize reads the per-kernel segments of lanehist (32 lanes x
// LinLogBuckets each: exits of warps whose lanes exited apart) and
// spreadhist (shards x LinLogBuckets each: every exit). A warp that exited
// as one is 32 exits of the spread and none of the lane table, so on-time
// warps are their difference / 32, each lane 0 ns late: a whole warp's
// exit makes one atomic add instead of two. Read while kernels run, the lane table
// (read first) may lag the spread by a few warps; at the end it is exact.
func summarize(lanehist, spreadhist []uint64) []kernelSummary {
	const nb = toolkit.LinLogBuckets
	var out []kernelSummary
	for k := 0; (k+1)*32*nb <= len(lanehist); k++ {
		s := kernelSummary{kernel: uint32(k)}
		var lanes, all uint64
		for _, c := range lanehist[k*32*nb : (k+1)*32*nb] {
			lanes += c
		}
		if (k+1)*shards*nb <= len(spreadhist) {
			for _, c := range spreadhist[k*shards*nb : (k+1)*shards*nb] {
				all += c
			}
		}
		full := (all - min(all, lanes)) / 32
		var medians []uint64
		h := make([]uint64, nb)
		for l := 0; l < 32; l++ {
			copy(h, lanehist[(k*32+l)*nb:(k*32+l+1)*nb])
			h[0] += full
			p50, n := toolkit.LinLogQuantile(h, 0.5)
			if n == 0 {
				continue
			}
			p99, _ := toolkit.LinLogQuantile(h, 0.99)
			s.lanes[l] = laneStat{exits: n, p50: p50, p99: p99}
			s.exits += n
			medians = append(medians, p50)
		}
		if s.exits == 0 {
			continue
		}
		sort.Slice(medians, func(i, j int) bool { return medians[i] < medians[j] })
		base := medians[len(medians)/2]
		for l := range s.lanes {
			ls := &s.lanes[l]
			if ls.exits > 0 && ls.p50 >= lateFloorNs && ls.p50 >= lateFactor*base {
				ls.late = true
				s.late = append(s.late, l)
			}
		}
		if (k+1)*shards*nb <= len(spreadhist) {
			clear(h)
			for sh := 0; sh < shards; sh++ {
				for b, c := range spreadhist[(k*shards+sh)*nb : (k*shards+sh+1)*nb] {
					h[b] += c
				}
			}
			s.spreadP50, _ = toolkit.LinLogQuantile(h, 0.5)
			s.spreadP99, _ = toolkit.LinLogQuantile(h, 0.99)
			s.spreadMax, _ = toolkit.LinLogQuantile(h, 1)
		}
		out = append(out, s)
	}
	return out
}

type reporter struct {
	events *eventPrinter
	lost   []uint64
	exits  uint64
	// perDevice: one summary per kernel and device (--per-device); dev is
	// the one being rendered (-1: all devices together)
	perDevice bool
	dev       int
	gauges    map[string]*prometheus.GaugeVec // --prometheus
}

func (r *reporter) report(rep *toolkit.Report) {
	if rep.Final {
		r.totals(rep)
	}
	toolkit.EachDevice(rep, r.perDevice, func(d *toolkit.Report, dev int) {
		r.dev = dev
		r.reportOne(d)
	})
}

func (r *reporter) reportOne(rep *toolkit.Report) {
	sums := summarize(rep.U64("lanehist"), rep.U64("spreadhist"))
	if rep.Final && rep.Interval && len(sums) == 0 {
		return
	}
	for _, s := range sums {
		if rep.JSON {
			r.json(rep, s)
		} else {
			r.text(rep.W, rep, s)
		}
	}
	if len(sums) == 0 && !rep.JSON {
		fmt.Fprintf(rep.W, "%sno instrumented thread exited\n", rep.Prefix())
	}
}

// totals takes the account's numbers from the trace's totals so far.
func (r *reporter) totals(rep *toolkit.Report) {
	r.lost = rep.Total("lost")
	// Every exit counted once, in the launch spread.
	r.exits = 0
	for _, v := range rep.Total("spreadhist") {
		r.exits += v
	}
}

// metrics sets, per kernel (and device with --per-device: "all" without),
// the numbers of its summary (--prometheus, --otlp), and the account's,
// which the refresh exports next.
func (r *reporter) metrics(rep *toolkit.Report) {
	r.totals(rep)
	e := rep.Exporter
	if r.gauges == nil {
		r.gauges = e.Gauges([]string{"device", "kernel"}, map[string][2]string{
			"exits":      {"exits", "Thread exits counted, per kernel (and device)."},
			"late_lanes": {"late_lanes", "Warp lanes that exit late (their median lateness well above the median lane's)."},
			"spread_p99": {"exit_spread_p99_seconds", "99th percentile of a thread's exit after its launch's first exit."},
			"spread_max": {"exit_spread_max_seconds", "Largest exit after its launch's first exit."},
		})
	}
	toolkit.EachDevice(rep, r.perDevice, func(d *toolkit.Report, dev int) {
		devl := toolkit.DeviceLabel(dev)
		for _, s := range summarize(d.U64("lanehist"), d.U64("spreadhist")) {
			base, _ := d.Kernel(s.kernel)
			lv := e.Labels("kernel", devl, toolkit.ShortName(base))
			r.gauges["exits"].WithLabelValues(lv...).Set(float64(s.exits))
			r.gauges["late_lanes"].WithLabelValues(lv...).Set(float64(len(s.late)))
			r.gauges["spread_p99"].WithLabelValues(lv...).Set(float64(s.spreadP99) / 1e9)
			r.gauges["spread_max"].WithLabelValues(lv...).Set(float64(s.spreadMax) / 1e9)
		}
	})
}

func (r *reporter) text(w io.Writer, rep *toolkit.Report, s kernelSummary) {
	base, _ := rep.Kernel(s.kernel)
	if r.dev >= 0 {
		base += fmt.Sprintf(" [device %d]", r.dev)
	}
	fmt.Fprintf(w, "\n%s%s: %d thread exits\n", rep.Prefix(), base, s.exits)
	fmt.Fprintf(w, "  exit spread (thread exit - its launch's first exit): p50 %s, p99 %s, max %s\n",
		toolkit.FormatNs(s.spreadP50), toolkit.FormatNs(s.spreadP99), toolkit.FormatNs(s.spreadMax))
	fmt.Fprintf(w, "  lateness per lane (exit - its warp's first exit):\n")
	tb := tablewriter.NewTable(w)
	tb.Header("LANE", "EXITS", "MEDIAN", "P99", "")
	for l, ls := range s.lanes {
		if ls.exits == 0 {
			continue
		}
		mark := ""
		if ls.late {
			mark = "<- late"
		}
		tb.Append(strconv.Itoa(l), strconv.FormatUint(ls.exits, 10), toolkit.FormatNs(ls.p50), toolkit.FormatNs(ls.p99), mark)
	}
	tb.Render()
	if len(s.late) > 0 {
		var ls []string
		for _, l := range s.late {
			ls = append(ls, fmt.Sprintf("lane %d (median %s late)", l, toolkit.FormatNs(s.lanes[l].p50)))
		}
		fmt.Fprintf(w, "  late: %s of every warp\n", strings.Join(ls, ", "))
	} else {
		fmt.Fprintf(w, "  no lane is late: lanes exit with their warp\n")
	}
}

func (r *reporter) json(rep *toolkit.Report, s kernelSummary) {
	base, mangled := rep.Kernel(s.kernel)
	b := []byte(`{"type":"kernel","time":`)
	b = toolkit.AppendJSONString(b, rep.Now.Format("15:04:05"))
	b = append(b, `,"kernel":`...)
	b = toolkit.AppendJSONString(b, base)
	b = append(b, `,"mangled":`...)
	b = toolkit.AppendJSONString(b, mangled)
	if r.dev >= 0 {
		b = fmt.Appendf(b, `,"device":%d`, r.dev)
	}
	b = fmt.Appendf(b, `,"exits":%d,"spread_p50_ns":%d,"spread_p99_ns":%d,"spread_max_ns":%d,"lanes":[`, s.exits, s.spreadP50, s.spreadP99, s.spreadMax)
	first := true
	for l, ls := range s.lanes {
		if ls.exits == 0 {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = fmt.Appendf(b, `{"lane":%d,"exits":%d,"p50_ns":%d,"p99_ns":%d,"late":%t}`, l, ls.exits, ls.p50, ls.p99, ls.late)
	}
	b = append(b, "]}\n"...)
	rep.W.Write(b)
}

func (r *reporter) account(a *toolkit.Account, _ runtime.Stats) {
	var lost [3]uint64
	copy(lost[:], r.lost)
	a.Add(r.exits, "thread exits counted", "")
	if lost[0] > 0 {
		a.Add(lost[0], "exits not counted", "more than 16 kernels, or an exit in a device function several kernels share")
	}
	if lost[1] > 0 {
		a.Add(lost[1], "exits not counted", "an SM id beyond the slot table")
	}
	if lost[2] > 0 {
		a.Add(lost[2], "exits not counted per lane", "lanes of a split warp whose slot other warps kept taking")
	}
	if r.events != nil {
		r.events.mu.Lock()
		if r.events.bad > 0 {
			a.Add(r.events.bad, "malformed exit records", "")
		}
		r.events.mu.Unlock()
	}
}
