package launchlate

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/olekukonko/tablewriter"

	"github.com/gpubpf/gpubpf/pkg/runtime"
	"github.com/gpubpf/gpubpf/pkg/toolkit"
)

// row is one key's summary, in report order (p99 first).
type row struct {
	k                        key
	s                        *stats
	p50, p90, p99, p999, max uint64
	b50, b90, b99, b999, bmx bool
}

func (l *launchlate) kernelName(i uint32) (base, mangled string) {
	return toolkit.KernelNames(l.nameOf(i))
}

func streamName(s uint64) string {
	switch s {
	case 0:
		return "default"
	case 2:
		return "per-thread default"
	case streamUnknown:
		return "unknown"
	}
	return "0x" + strconv.FormatUint(s, 16)
}

func (l *launchlate) label(k key) string {
	base, _ := l.kernelName(k.kernel)
	if k.graph {
		base += " (in a CUDA graph)"
	}
	switch {
	case l.byStream && k.graph:
		base += fmt.Sprintf(" [pid %d]", k.pid)
	case l.byStream:
		base += fmt.Sprintf(" [pid %d, stream %s]", k.pid, streamName(k.stream))
	}
	return base
}

// report prints the current histograms (and resets them with -i).
func (l *launchlate) report(final bool) {
	l.mu.Lock()
	cur := l.cur
	if l.interval {
		l.cur = map[key]*stats{}
	}
	l.mu.Unlock()
	if l.interval && !final && len(cur) == 0 && !l.json {
		return
	}
	var rows []row
	for k, s := range cur {
		r := row{k: k, s: s}
		if s.n > 0 {
			r.p50, r.b50 = s.quantile(50)
			r.p90, r.b90 = s.quantile(90)
			r.p99, r.b99 = s.quantile(99)
			r.p999, r.b999 = s.quantile(99.9)
			r.max, r.bmx = s.max()
		}
		rows = append(rows, r)
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].p99 != rows[j].p99 {
			return rows[i].p99 > rows[j].p99
		}
		return l.label(rows[i].k) < l.label(rows[j].k)
	})
	now := time.Now()
	if l.json {
		for _, r := range rows {
			l.rowJSON(now, r)
		}
		return
	}
	w := l.w
	prefix := ""
	if l.stamp {
		prefix = now.Format("15:04:05") + " "
	}
	if len(rows) == 0 {
		fmt.Fprintf(w, "%sno instrumented kernel started\n", prefix)
		return
	}
	unit, div := "usecs", uint64(1)
	if l.ms {
		unit, div = "msecs", 1000
	}
	for _, r := range rows {
		fmt.Fprintf(w, "\n%skernel = %s\n", prefix, l.label(r.k))
		if r.s.n == 0 {
			fmt.Fprintf(w, "  %d starts, none timed\n", r.s.untimed)
			continue
		}
		h := r.s.log2
		if div > 1 {
			h = toolkit.Log2Hist{}
			for i, c := range r.s.log2 {
				if c > 0 {
					v := uint64(1) << i / div
					h[toolkit.Log2Index(v)] += c
				}
			}
		}
		h.Print(w, unit)
		fmt.Fprintf(w, "  launches %d, p50 %s, p90 %s, p99 %s, p99.9 %s, max %s (", r.s.n, fmtLat(r.p50, r.b50, r.s.bound),
			fmtLat(r.p90, r.b90, r.s.bound), fmtLat(r.p99, r.b99, r.s.bound), fmtLat(r.p999, r.b999, r.s.bound),
			fmtLat(r.max, r.bmx, r.s.bound))
		switch {
		case r.s.cupti == r.s.n:
			fmt.Fprint(w, "timed by CUPTI")
		case r.s.cupti > 0:
			fmt.Fprintf(w, "%d timed by CUPTI; clock error bound %s", r.s.cupti, toolkit.FormatNs(r.s.bound))
		default:
			fmt.Fprintf(w, "clock error bound %s", toolkit.FormatNs(r.s.bound))
		}
		if r.s.below > 0 {
			fmt.Fprintf(w, "; %d below it", r.s.below)
		}
		if r.s.untimed > 0 {
			fmt.Fprintf(w, "; %d starts not timed", r.s.untimed)
		}
		fmt.Fprintln(w, ")")
		if r.s.dur != nil {
			d := r.s.durs()
			fmt.Fprintf(w, "  run time: %d kernels, p50 %s, p90 %s, p99 %s, p99.9 %s, max %s (CUPTI)\n", r.s.dur.TotalCount(),
				toolkit.FormatNs(d.p50), toolkit.FormatNs(d.p90), toolkit.FormatNs(d.p99), toolkit.FormatNs(d.p999), toolkit.FormatNs(d.max))
		}
	}
	fmt.Fprintf(w, "\n%skernels by p99 launch -> start latency:\n", prefix)
	tb := tablewriter.NewTable(w)
	width := 48
	if l.cupti {
		// run times beside the latencies (CUPTI's records)
		width = 36
		tb.Header("KERNEL", "LAUNCHES", "P50", "P90", "P99", "MAX", "RUN P50", "RUN P90", "RUN P99", "RUN MAX")
	} else {
		tb.Header("KERNEL", "LAUNCHES", "P50", "P90", "P99", "MAX")
	}
	for _, r := range rows {
		cells := []string{trim(l.label(r.k), width), strconv.FormatUint(r.s.untimed, 10) + " untimed", "-", "-", "-", "-"}
		if r.s.n > 0 {
			launches := strconv.FormatUint(r.s.n, 10)
			if r.s.untimed > 0 {
				launches += fmt.Sprintf(" +%d untimed", r.s.untimed)
			}
			cells = []string{trim(l.label(r.k), width), launches, fmtLat(r.p50, r.b50, r.s.bound),
				fmtLat(r.p90, r.b90, r.s.bound), fmtLat(r.p99, r.b99, r.s.bound), fmtLat(r.max, r.bmx, r.s.bound)}
		}
		if l.cupti {
			if r.s.dur == nil {
				cells = append(cells, "-", "-", "-", "-")
			} else {
				d := r.s.durs()
				cells = append(cells, toolkit.FormatNs(d.p50), toolkit.FormatNs(d.p90), toolkit.FormatNs(d.p99), toolkit.FormatNs(d.max))
			}
		}
		tb.Append(cells)
	}
	tb.Render()
}

func trim(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}

func (l *launchlate) rowJSON(now time.Time, r row) {
	base, mangled := l.kernelName(r.k.kernel)
	b := []byte(`{"type":"kernel","time":`)
	b = toolkit.AppendJSONString(b, now.Format("15:04:05"))
	b = append(b, `,"kernel":`...)
	b = toolkit.AppendJSONString(b, base)
	b = append(b, `,"mangled":`...)
	b = toolkit.AppendJSONString(b, mangled)
	if l.byStream {
		stream := streamName(r.k.stream)
		if r.k.graph {
			stream = "graph" // the graph launch's stream is not known
		}
		b = fmt.Appendf(b, `,"pid":%d,"stream":"%s"`, r.k.pid, stream)
	}
	b = fmt.Appendf(b, `,"graph":%t,"launches":%d,"p50_ns":%d,"p90_ns":%d,"p99_ns":%d,"p999_ns":%d,"max_ns":%d,"below_bound":%d,"bound_ns":%d,"untimed":%d,"cupti":%d`,
		r.k.graph, r.s.n, r.p50, r.p90, r.p99, r.p999, r.max, r.s.below, r.s.bound, r.s.untimed, r.s.cupti)
	if r.s.dur != nil {
		d := r.s.durs()
		b = fmt.Appendf(b, `,"dur_launches":%d,"dur_p50_ns":%d,"dur_p90_ns":%d,"dur_p99_ns":%d,"dur_p999_ns":%d,"dur_max_ns":%d`,
			r.s.dur.TotalCount(), d.p50, d.p90, d.p99, d.p999, d.max)
	}
	b = append(b, `,"hist_us":[`...)
	first := true
	for i, c := range r.s.log2 {
		if c == 0 {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		low, high := uint64(1)<<i, uint64(1)<<(i+1)-1
		if i == 0 {
			low = 0
		}
		b = fmt.Appendf(b, "[%d,%d,%d]", low, high, c)
	}
	b = append(b, "]}\n"...)
	l.w.Write(b)
}

func (l *launchlate) summaryJSON(st runtime.Stats) {
	lost := int64(l.produced) - int64(l.tr.read)
	// graph_untimed: counted on the GPU without a stamp, or a swapped
	// node's run whose launch stamp was not found (graph_no_stamp, also in
	// untimed)
	graphUntimed := l.graphN + l.tr.noStamp
	b := fmt.Appendf(nil, `{"type":"summary","timed":%d,"untimed":%d,"graph_kernel_starts":%d,"graph_timed":%d,"graph_untimed":%d,"graph_no_stamp":%d,"lost":%d,"calls_runtime":%d,"calls_graph":%d,"clock_bound_ns":%d,"calibrations":%d`,
		l.timedN, l.untimedN, l.graphT+graphUntimed, l.graphT, graphUntimed, l.tr.noStamp, max(lost, 0), l.calls[kindRuntime], l.calls[kindGraphRT], l.maxBound, l.clocks)
	if l.cupti {
		b = fmt.Appendf(b, `,"cupti_records":%d,"cupti_timed":%d,"cupti_untimed":%d,"cupti_dropped":%d,"cupti_off":{`,
			l.ktRecords, l.ktTimed, l.ktUntimed, st.KernelTimesDropped)
		for i, pid := range slices.Sorted(maps.Keys(st.KernelTimesOff)) {
			if i > 0 {
				b = append(b, ',')
			}
			b = fmt.Appendf(b, `"%d":`, pid)
			b = toolkit.AppendJSONString(b, st.KernelTimesOff[pid])
		}
		// what CUPTI handed over in each process, and how launches were
		// stamped (the agent's account)
		b = append(b, `},"cupti_account":{`...)
		for i, pid := range slices.Sorted(maps.Keys(st.KernelTimesCUPTI)) {
			if i > 0 {
				b = append(b, ',')
			}
			b = fmt.Appendf(b, `"%d":`, pid)
			b = toolkit.AppendJSONString(b, st.KernelTimesCUPTI[pid])
		}
		// -p: how long after the attach CUPTI came on (launches of kernels
		// without PTX before then are in no count)
		b = append(b, `},"cupti_late_ns":{`...)
		for i, pid := range slices.Sorted(maps.Keys(st.KernelTimesLate)) {
			if i > 0 {
				b = append(b, ',')
			}
			b = fmt.Appendf(b, `"%d":%d`, pid, st.KernelTimesLate[pid].Nanoseconds())
		}
		b = append(b, '}')
	}
	b = append(b, "}\n"...)
	l.w.Write(b)
}
