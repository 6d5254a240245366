package threadhist

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

// byKey is one --by choice: the code the BPF program switches on.
type byKey struct {
	name        string
	code        uint32
	defaultKeys uint32
}

var byKeys = []byKey{
	{"thread.x", 0, 1024},
	{"global", 1, 1 << 20},
	{"block", 2, 1 << 16},
	{"warp", 3, 1 << 18},
}

func parseBy(s string) (byKey, error) {
	names := make([]string, len(byKeys))
	for i, b := range byKeys {
		if b.name == s {
			return b, nil
		}
		names[i] = b.name
	}
	return byKey{}, toolkit.Usagef("--by %q: want one of %s", s, strings.Join(names, ", "))
}

type keyStat struct {
	key       uint64
	runs, ns  uint64
	perRunNs  float64
	ofMeanPct float64
}

// kernelSummary is what threadhist shows for one kernel.
type kernelSummary struct {
	kernel           uint32
	keys             []keyStat // keys that ran, busiest first
	runs, ns         uint64
	minNs, maxNs     uint64
	meanNs           float64
	below            []keyStat // keys below 80% of the mean busy time
	runsMin, runsMax uint64
	busyHist         toolkit.Log2Hist // busy time per key, in unit
	runsHist         toolkit.Log2Hist // runs per key
	unit             string
	div              uint64
}

// summarize splits the per-kernel segments of runs and nsecs (keys
// entries each) into per-kernel summaries, busiest key first.
func summarize(runs, ns []uint64, keys uint32) []kernelSummary {
	var out []kernelSummary
	for seg := 0; seg*int(keys) < len(runs); seg++ {
		lo, hi := seg*int(keys), min((seg+1)*int(keys), len(runs))
		s := kernelSummary{kernel: uint32(seg)}
		for i := lo; i < hi; i++ {
			if runs[i] == 0 {
				continue
			}
			var n uint64
			if i < len(ns) {
				n = ns[i]
			}
			s.keys = append(s.keys, keyStat{key: uint64(i - lo), runs: runs[i], ns: n, perRunNs: float64(n) / float64(runs[i])})
		}
		if len(s.keys) == 0 {
			continue
		}
		s.minNs, s.runsMin = ^uint64(0), ^uint64(0)
		for _, k := range s.keys {
			s.runs += k.runs
			s.ns += k.ns
			s.minNs, s.maxNs = min(s.minNs, k.ns), max(s.maxNs, k.ns)
			s.runsMin, s.runsMax = min(s.runsMin, k.runs), max(s.runsMax, k.runs)
		}
		s.meanNs = float64(s.ns) / float64(len(s.keys))
		s.unit, s.div = "nsecs", 1
		if s.maxNs >= 100_000 {
			s.unit, s.div = "usecs", 1000
		}
		if s.maxNs >= 100_000_000 {
			s.unit, s.div = "msecs", 1_000_000
		}
		for i := range s.keys {
			k := &s.keys[i]
			if s.meanNs > 0 {
				k.ofMeanPct = 100 * float64(k.ns) / s.meanNs
			}
			if float64(k.ns) < 0.8*s.meanNs {
				s.below = append(s.below, *k)
			}
			s.busyHist.Add(k.ns / s.div)
			s.runsHist.Add(k.runs)
		}
		sort.SliceStable(s.keys, func(i, j int) bool { return s.keys[i].ns > s.keys[j].ns })
		out = append(out, s)
	}
	return out
}

// fold sums the shard copies of each kernel's segment (shards x keys
// entries per kernel) into one segment of keys entries.
func fold(v []uint64, shards, keys uint32) []uint64 {
	if shards <= 1 {
		return v
	}
	seg := int(shards * keys)
	out := make([]uint64, len(v)/int(shards))
	for i, x := range v {
		k, off := i/seg, i%int(keys)
		out[k*int(keys)+off] += x
	}
	return out
}

type reporter struct {
	shards  uint32
	by      byKey
	keys    uint32
	kernels uint32
	top     int
	lost    []uint64
	total   uint64 // runs counted (totals, also with -i)
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
	sums := summarize(fold(rep.U64("runs"), r.shards, r.keys), fold(rep.U64("nsecs"), r.shards, r.keys), r.keys)
	// With -i every interval has been printed; the end prints the last,
	// partial one only if it saw anything.
	if rep.Final && rep.Interval && len(sums) == 0 {
		return
	}
	if rep.JSON {
		for _, s := range sums {
			r.json(rep, s)
		}
		return
	}
	w := rep.W
	if len(sums) == 0 && !rep.Final {
		fmt.Fprintf(w, "%sno instrumented thread exited in this interval\n", rep.Prefix())
		return
	}
	for _, s := range sums {
		r.text(w, rep, s)
	}
}

// totals takes the account's numbers from the trace's totals so far.
func (r *reporter) totals(rep *toolkit.Report) {
	r.lost = rep.Total("lost")
	r.total = 0
	for _, v := range rep.Total("runs") {
		r.total += v
	}
}

// metrics sets, per kernel (and device with --per-device: "all" without),
// the numbers of its summary line (--prometheus, --otlp), and the
// account's, which the refresh exports next.
func (r *reporter) metrics(rep *toolkit.Report) {
	r.totals(rep)
	e := rep.Exporter
	if r.gauges == nil {
		r.gauges = e.Gauges([]string{"device", "kernel"}, map[string][2]string{
			"runs":          {"runs", "Thread runs counted, per kernel (and device)."},
			"busy_seconds":  {"busy_seconds", "Busy time of the kernel's threads in all."},
			"max_over_mean": {"max_over_mean", "Imbalance: the busiest key's busy time over the mean key's."},
			"below_80pct":   {"keys_below_80pct", "Keys (threads, blocks, warps: --by) busy less than 80% of the mean."},
		})
	}
	toolkit.EachDevice(rep, r.perDevice, func(d *toolkit.Report, dev int) {
		devl := toolkit.DeviceLabel(dev)
		for _, s := range summarize(fold(d.U64("runs"), r.shards, r.keys), fold(d.U64("nsecs"), r.shards, r.keys), r.keys) {
			base, _ := d.Kernel(s.kernel)
			lv := e.Labels("kernel", devl, toolkit.ShortName(base))
			r.gauges["runs"].WithLabelValues(lv...).Set(float64(s.runs))
			r.gauges["busy_seconds"].WithLabelValues(lv...).Set(float64(s.ns) / 1e9)
			r.gauges["max_over_mean"].WithLabelValues(lv...).Set(float64(s.maxNs) / s.meanNs)
			r.gauges["below_80pct"].WithLabelValues(lv...).Set(float64(len(s.below)))
		}
	})
}

func fmtNs(ns float64) string {
	switch {
	case ns >= 1e9:
		return strconv.FormatFloat(ns/1e9, 'f', 2, 64) + " s"
	case ns >= 1e6:
		return strconv.FormatFloat(ns/1e6, 'f', 2, 64) + " ms"
	case ns >= 1e3:
		return strconv.FormatFloat(ns/1e3, 'f', 2, 64) + " us"
	}
	return strconv.FormatFloat(ns, 'f', 0, 64) + " ns"
}

func (r *reporter) text(w io.Writer, rep *toolkit.Report, s kernelSummary) {
	base, _ := rep.Kernel(s.kernel)
	if r.dev >= 0 {
		base += fmt.Sprintf(" [device %d]", r.dev)
	}
	fmt.Fprintf(w, "\n%s%s: %d thread runs over %d %s keys, busy %s in all\n", rep.Prefix(), base, s.runs, len(s.keys), r.by.name, fmtNs(float64(s.ns)))
	tb := tablewriter.NewTable(w)
	tb.Header("", strings.ToUpper(r.by.name), "RUNS", "BUSY", "PER RUN", "OF MEAN")
	row := func(what string, k keyStat) {
		tb.Append(what, strconv.FormatUint(k.key, 10), strconv.FormatUint(k.runs, 10), fmtNs(float64(k.ns)),
			fmtNs(k.perRunNs), strconv.FormatFloat(k.ofMeanPct, 'f', 0, 64)+"%")
	}
	n := min(r.top, len(s.keys))
	for i := 0; i < n; i++ {
		row("busiest", s.keys[i])
	}
	for i := 0; i < min(r.top, len(s.keys)-n); i++ {
		row("idlest", s.keys[len(s.keys)-1-i])
	}
	tb.Render()
	s.busyHist.Print(w, "busy "+s.unit)
	if s.runsMin != s.runsMax {
		s.runsHist.Print(w, "runs")
	}
	line := fmt.Sprintf("imbalance: busy per %s min %s, mean %s, max %s, max/mean %.2f; %d of %d below 80%% of the mean",
		r.by.name, fmtNs(float64(s.minNs)), fmtNs(s.meanNs), fmtNs(float64(s.maxNs)), float64(s.maxNs)/s.meanNs, len(s.below), len(s.keys))
	if len(s.below) > 0 {
		sort.Slice(s.below, func(i, j int) bool { return s.below[i].key < s.below[j].key })
		var ks []string
		for i, k := range s.below {
			if i == 8 {
				ks = append(ks, "...")
				break
			}
			ks = append(ks, strconv.FormatUint(k.key, 10))
		}
		line += " (" + r.by.name + " " + strings.Join(ks, ", ") + ")"
	}
	fmt.Fprintln(w, "  "+line)
	fmt.Fprintf(w, "  runs per %s: min %d, max %d, %d in all\n", r.by.name, s.runsMin, s.runsMax, s.runs)
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
	b = append(b, `,"by":`...)
	b = toolkit.AppendJSONString(b, r.by.name)
	b = fmt.Appendf(b, `,"keys":%d,"runs":%d,"busy_ns":%d,"busy_min_ns":%d,"busy_mean_ns":%.0f,"busy_max_ns":%d,"max_over_mean":%.3f,"below_80pct":%d,"runs_min":%d,"runs_max":%d`,
		len(s.keys), s.runs, s.ns, s.minNs, s.meanNs, s.maxNs, float64(s.maxNs)/s.meanNs, len(s.below), s.runsMin, s.runsMax)
	list := func(name string, ks []keyStat) {
		b = append(b, `,"`+name+`":[`...)
		for i, k := range ks {
			if i > 0 {
				b = append(b, ',')
			}
			b = fmt.Appendf(b, `{"key":%d,"runs":%d,"busy_ns":%d}`, k.key, k.runs, k.ns)
		}
		b = append(b, ']')
	}
	n := min(r.top, len(s.keys))
	list("busiest", s.keys[:n])
	var idle []keyStat
	for i := 0; i < min(r.top, len(s.keys)-n); i++ {
		idle = append(idle, s.keys[len(s.keys)-1-i])
	}
	list("idlest", idle)
	b = append(b, "}\n"...)
	rep.W.Write(b)
}

// account adds what threadhist lost to the completeness line.
func (r *reporter) account(a *toolkit.Account, _ runtime.Stats) {
	var lost [3]uint64
	copy(lost[:], r.lost)
	a.Add(r.total, "thread runs counted", "")
	a.Add(lost[0], "runs not counted", fmt.Sprintf("%s beyond the %d-key table: raise --max-keys", r.by.name, r.keys))
	if lost[1] > 0 {
		a.Add(lost[1], "runs not counted", fmt.Sprintf("more than %d kernels, or a probe in a device function several kernels share", r.kernels))
	}
	if lost[2] > 0 {
		a.Add(lost[2], "runs without busy time", "no entry time: the probe was called, not pasted into the kernel")
	}
}
