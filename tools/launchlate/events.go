package launchlate

import (
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gpubpf/gpubpf/pkg/toolkit"
)

// --events: one line per timed launch, bcc raw-event style (opensnoop,
// biosnoop). A launch can only be printed once a clock calibration after
// its CPU stamp places it, so lines come in batches (one per reading of the
// start table); each batch is put in launch-call order, since the table is
// read in slot order.

// launchEvent is one timed launch waiting to be printed.
type launchEvent struct {
	src source
	lat latency
}

// eventFormat is how launch lines are written.
type eventFormat struct {
	json  bool
	stamp bool   // -T: wall-clock HH:MM:SS first
	ms    bool   // -m: LAT(ms) instead of LAT(us)
	t0    uint64 // CLOCK_MONOTONIC ns as tracing started: TIME(s) zero
	wall  int64  // CLOCK_REALTIME - CLOCK_MONOTONIC, ns: turns a stamp into -T's clock
	dur   bool   // a DUR column: CUPTI's records give run times
}

// Column widths of the text lines; KERNEL is last because names vary the
// most in length.
const (
	wTime   = 12
	wPID    = 7
	wDev    = 3
	wLat    = 9
	wStream = 18 // "per-thread default"
)

// header is the column line printed once before the first text line.
func (f eventFormat) header() string {
	var b []byte
	if f.stamp {
		b = appendPad(b, "TIME", 8)
	}
	lat := "LAT(us)"
	if f.ms {
		lat = "LAT(ms)"
	}
	b = appendPad(b, "TIME(s)", wTime)
	b = appendPad(b, "PID", wPID)
	b = appendPad(b, "DEV", wDev)
	b = appendPad(b, lat, wLat)
	if f.dur {
		b = appendPad(b, strings.Replace(lat, "LAT", "DUR", 1), wLat)
	}
	b = appendPad(b, "STREAM", wStream)
	b = append(b, "KERNEL\n"...)
	return string(b)
}

// appendLaunch appends one launch's line (text or JSON) to b. base and
// mangled are the kernel's names.
func (f eventFormat) appendLaunch(b []byte, e launchEvent, base, mangled string) []byte {
	if f.json {
		return appendLaunchJSON(b, e, base, mangled)
	}
	s, l := e.lat.s, e.lat
	if f.stamp {
		b = toolkit.AppendClock(b, time.Unix(0, int64(s.cpu)+f.wall))
		b = append(b, ' ')
	}
	// A launch stamped before the trace began (-p, a start already queued)
	// is shown at 0 rather than as a negative time.
	secs := float64(s.cpu-min(s.cpu, f.t0)) / 1e9
	b = appendPad(b, strconv.FormatFloat(secs, 'f', 6, 64), wTime)
	b = appendPad(b, strconv.Itoa(e.src.pid), wPID)
	b = appendPad(b, strconv.Itoa(e.src.dev), wDev)
	b = appendPad(b, f.latText(l), wLat)
	if f.dur {
		d := "-" // a probe's launch whose record has not come
		if l.dur > 0 {
			d = f.nsText(l.dur)
		}
		b = appendPad(b, d, wLat)
	}
	b = appendPad(b, launchStream(s), wStream)
	b = append(b, base...)
	return append(b, '\n')
}

// latText is a latency in the column's unit, or "<BOUND" when the clocks
// cannot tell it from zero (the "< bound" of the histograms, as one token
// so the column stays awk-friendly).
func (f eventFormat) latText(l latency) string {
	div, prec, scale := 1e3, 1, 10.0
	if f.ms {
		div, prec, scale = 1e6, 3, 1000
	}
	if l.ns < int64(l.bound) {
		// Rounded up: "<0.6" for a 650 ns bound would claim more than is known.
		return "<" + strconv.FormatFloat(math.Ceil(float64(l.bound)/div*scale)/scale, 'f', prec, 64)
	}
	return strconv.FormatFloat(float64(l.ns)/div, 'f', prec, 64)
}

// nsText is a time in the column's unit.
func (f eventFormat) nsText(ns uint64) string {
	if f.ms {
		return strconv.FormatFloat(float64(ns)/1e6, 'f', 3, 64)
	}
	return strconv.FormatFloat(float64(ns)/1e3, 'f', 1, 64)
}

// launchStream is the stream as the kernel lines name it; a graph kernel's
// stream is not known (the graph launch's is not recorded on the GPU).
func launchStream(s start) string {
	if s.isGraph() {
		return "graph"
	}
	return streamName(s.stream)
}

// appendLaunchJSON appends {"type":"launch",...}. latency_ns is signed and
// unclamped (unlike the histograms): a cross-check compares it with other
// clocks, and within bound_ns of zero its sign carries no meaning.
func appendLaunchJSON(b []byte, e launchEvent, base, mangled string) []byte {
	s, l := e.lat.s, e.lat
	b = append(b, `{"type":"launch","pid":`...)
	b = strconv.AppendInt(b, int64(e.src.pid), 10)
	b = append(b, `,"device":`...)
	b = strconv.AppendInt(b, int64(e.src.dev), 10)
	b = append(b, `,"kernel":`...)
	b = toolkit.AppendJSONString(b, base)
	b = append(b, `,"mangled":`...)
	b = toolkit.AppendJSONString(b, mangled)
	b = append(b, `,"stream":`...)
	b = toolkit.AppendJSONString(b, launchStream(s))
	b = append(b, `,"graph":`...)
	b = strconv.AppendBool(b, s.isGraph())
	b = append(b, `,"grid":`...)
	b = strconv.AppendUint(b, s.grid, 10)
	b = append(b, `,"cpu_ns":`...)
	b = strconv.AppendUint(b, s.cpu, 10)
	b = append(b, `,"gpu_ns":`...)
	b = strconv.AppendInt(b, int64(s.cpu)+l.ns, 10)
	b = append(b, `,"latency_ns":`...)
	b = strconv.AppendInt(b, l.ns, 10)
	b = append(b, `,"bound_ns":`...)
	b = strconv.AppendUint(b, l.bound, 10)
	b = append(b, `,"source":`...)
	if l.cupti {
		b = append(b, `"cupti"`...)
	} else {
		b = append(b, `"probe"`...)
	}
	if l.dur > 0 {
		b = append(b, `,"duration_ns":`...)
		b = strconv.AppendUint(b, l.dur, 10)
	}
	return append(b, "}\n"...)
}

func appendPad(b []byte, s string, width int) []byte {
	b = append(b, s...)
	for i := len(s); i < width; i++ {
		b = append(b, ' ')
	}
	return append(b, ' ')
}

// sortEvents puts a batch in launch-call order (ties: process, then grid
// id, so the order does not depend on the map walk in resolve).
func sortEvents(evs []launchEvent) {
	sort.Slice(evs, func(i, j int) bool {
		a, b := evs[i], evs[j]
		if a.lat.s.cpu != b.lat.s.cpu {
			return a.lat.s.cpu < b.lat.s.cpu
		}
		if a.src != b.src {
			return a.src.pid < b.src.pid || a.src.pid == b.src.pid && a.src.dev < b.src.dev
		}
		return a.lat.s.grid < b.lat.s.grid
	})
}

// flushEvents prints the launches resolved since the last call (with
// --events), in 64 KiB writes rather than one per line. Called with l.mu
// held, after each resolve.
func (l *launchlate) flushEvents() {
	if len(l.batch) == 0 {
		return
	}
	sortEvents(l.batch)
	b := l.evBuf[:0]
	for _, e := range l.batch {
		n := l.eventName(e.lat.s.kernel)
		b = l.ev.appendLaunch(b, e, n.base, n.mangled)
		// A batch can hold 100k launches (launch_heavy): write in pieces
		// rather than keep megabytes of buffer for the rest of the trace.
		if len(b) >= eventChunk {
			l.w.Write(b)
			b = b[:0]
		}
	}
	l.w.Write(b)
	l.evBuf = b[:0]
	l.batch = l.batch[:0]
	if cap(l.batch) > 1<<16 {
		l.batch = nil // a burst's worth: give it back
	}
}

const eventChunk = 64 << 10

type kernelNames struct{ base, mangled string }

// eventName is kernelName, kept: demangling costs microseconds, and a
// launch-heavy program has 100k launches a second of a few kernels.
func (l *launchlate) eventName(i uint32) kernelNames {
	if n, ok := l.names[i]; ok {
		return n
	}
	base, mangled := l.kernelName(i)
	n := kernelNames{base, mangled}
	if mangled != "" { // an index not known yet may be later
		if l.names == nil {
			l.names = map[uint32]kernelNames{}
		}
		l.names[i] = n
	}
	return n
}
