package launchlate

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/gpubpf/gpubpf/pkg/runtime"
	"github.com/gpubpf/gpubpf/pkg/toolkit"
)

// Launch kinds (bpf/launchlate.h).
const (
	kindRuntime   = 1
	kindDriver    = 2
	kindGraphRT   = 3
	kindGraphDrv  = 4
	kindGraphWord = 0xFE // a graph's kernel, timed from its graph launch (stream unknown)
	kindGraphSeq  = 0xFD // a kernel node the agent swapped in: its run index, joined with its launch's stamp
	kindGraphNode = 0xFF // a graph's kernel without a stamp (counted in graph_starts only)
	kindPending   = 0x80
)

const (
	startSize  = 32 // struct ll_start
	streamMask = 1<<56 - 1
	// streamUnknown: a CUPTI-timed launch whose stream CUPTI's record of
	// the call does not name
	streamUnknown = streamMask
	gridMask      = 1<<48 - 1
)

// start is one kernel start as the GPU probe stored it.
type start struct {
	grid   uint64 // grid id, unique per launch in its context
	kernel uint32 // bpf_gpu_kernel_index
	gpu    uint64 // %globaltimer as thread 0 of block 0 started
	cpu    uint64 // the launch call's CLOCK_MONOTONIC time, 0: none
	stream uint64
	kind   uint8
	// a swapped graph kernel node's (LL_GRAPH_SEQ) id and run index: its
	// cpu is the stamp of the graph launch that ran it, found by them
	// (seqID 0: not one, or joined)
	seqID  uint32
	seqIdx uint64
}

// source is one context the starts come from: the clocks and grid ids
// are per context (a device's primary context, ctx 0, or one the
// application created itself) and process.
type source struct {
	pid, dev int
	ctx      uint64
}

// tracker finds the starts that are new since the last reading of the
// GPU's table (slot = grid id % LL_STARTS; graph kernels, which keep their
// grid id from one graph launch to the next, in turn after those), and
// holds them until a clock calibration taken after them can convert their
// GPU time. A slot holds a new start when its GPU time changed.
type tracker struct {
	seen    map[source][]uint64 // GPU time of each slot's start
	pending map[source][]start
	clocks  map[source][]runtime.ClockSample // the last clockKeep of them
	bounds  map[int]uint64                   // each device's largest error bound
	read    uint64                           // starts taken from the table
	torn    uint64                           // slots held back because they changed as they were read
	stale   uint64                           // starts no calibration came after within staleAfter
	// stampOf finds the stamp of a swapped graph node's run (nil: none
	// known); noStamp counts the runs it did not find
	stampOf func(src source, id uint32, idx uint64) (uint64, bool)
	noStamp uint64
}

// A context's calibrations kept: the starts waiting are never older than
// staleAfter, and the newest two place every later one. A start no
// calibration comes after within staleAfter (its context's calibrations
// fail) is counted untimed instead of held: held, they grew by 20 MB a
// second at 400,000 launches a second.
const (
	clockKeep  = 2 * time.Minute
	staleAfter = 3 * clockEvery
)

func newTracker() *tracker {
	return &tracker{seen: map[source][]uint64{}, pending: map[source][]start{}, clocks: map[source][]runtime.ClockSample{},
		bounds: map[int]uint64{}}
}

// ingest takes a reading of one context's start table. The GPU writes the
// table while the tool copies it, with nothing to order the two: again, a
// second copy taken just after vals, holds back a slot whose two copies
// differ, which was being written as it was read; the next reading takes it.
func (t *tracker) ingest(src source, vals, again []byte) {
	n := len(vals) / startSize
	if len(again) != len(vals) {
		return
	}
	seen := t.seen[src]
	if len(seen) != n {
		seen = make([]uint64, n)
		t.seen[src] = seen
	}
	for i := range n {
		rec := vals[i*startSize : (i+1)*startSize]
		w := binary.LittleEndian.Uint64(rec)
		gpu := binary.LittleEndian.Uint64(rec[8:])
		if w == 0 || gpu == seen[i] {
			continue
		}
		if !bytes.Equal(rec, again[i*startSize:(i+1)*startSize]) {
			t.torn++
			continue
		}
		seen[i] = gpu
		info := binary.LittleEndian.Uint64(rec[24:])
		s := start{
			grid:   w & gridMask,
			kernel: uint32(w >> 48),
			gpu:    gpu,
			cpu:    binary.LittleEndian.Uint64(rec[16:]),
			stream: info & streamMask,
			kind:   uint8(info >> 56),
		}
		if s.kind == kindGraphSeq {
			s.seqID, s.seqIdx = uint32(s.stream), s.cpu
			s.kind, s.stream, s.cpu = kindGraphWord, 0, 0
		}
		t.pending[src] = append(t.pending[src], s)
		t.read++
	}
}

// forget lets go of the contexts of process pid (gone: its last starts
// were taken at its exit); a start still waiting is counted untimed.
func (t *tracker) forget(pid int, untimed func(source, start)) {
	for src, ps := range t.pending {
		if src.pid == pid {
			for _, s := range ps {
				t.stale++
				untimed(src, s)
			}
			delete(t.pending, src)
		}
	}
	maps.DeleteFunc(t.seen, func(src source, _ []uint64) bool { return src.pid == pid })
	maps.DeleteFunc(t.clocks, func(src source, _ []runtime.ClockSample) bool { return src.pid == pid })
}

// addClock records a calibration of src's clocks, in time order, and lets
// go of those older than clockKeep before the newest (two stay).
func (t *tracker) addClock(src source, c runtime.ClockSample) {
	cs := t.clocks[src]
	i := sort.Search(len(cs), func(i int) bool { return cs[i].At > c.At })
	cs = slices.Insert(cs, i, c)
	newest := cs[len(cs)-1].At
	drop := 0
	for drop < len(cs)-2 && cs[drop].At+uint64(clockKeep) < newest {
		drop++
	}
	t.clocks[src] = slices.Delete(cs, 0, drop)
	t.bounds[src.dev] = max(t.bounds[src.dev], c.Bound)
}

// boundsByDevice says, where the calibrations cover several devices, each
// one's largest error bound (each device's clock is calibrated on its own):
// ", per device: 0 1226 ns, 1 1301 ns".
func (t *tracker) boundsByDevice() string {
	if len(t.bounds) < 2 {
		return ""
	}
	var parts []string
	for _, d := range slices.Sorted(maps.Keys(t.bounds)) {
		parts = append(parts, fmt.Sprintf("%d %s", d, toolkit.FormatNs(t.bounds[d])))
	}
	return ", per device: " + strings.Join(parts, ", ")
}

// offsetAt is the clock offset at CPU time at, interpolated between the
// calibrations around it, with its error bound. ok is false when no
// calibration comes after at and final is false: a later one will place
// it better (the clocks drift tens of microseconds in seconds). The offset
// stays an integer: where globaltimer counts ns since the Unix epoch (as
// current drivers set it) offsets are near 2^61, where a float64 only
// holds multiples of 256 ns; only the drift between two calibrations is
// scaled in floating point.
func offsetAt(cs []runtime.ClockSample, at uint64, final bool) (off int64, bound uint64, ok bool) {
	if len(cs) == 0 {
		return 0, 0, false
	}
	i := sort.Search(len(cs), func(i int) bool { return cs[i].At >= at })
	switch {
	case i == len(cs):
		if !final {
			return 0, 0, false
		}
		c := cs[len(cs)-1]
		return c.Offset, c.Bound, true
	case i == 0:
		return cs[0].Offset, cs[0].Bound, true
	}
	a, b := cs[i-1], cs[i]
	f := float64(at-a.At) / float64(b.At-a.At)
	return a.Offset + int64(math.Round(f*float64(b.Offset-a.Offset))), max(a.Bound, b.Bound), true
}

// latency is one timed launch: CPU call to GPU start, and how exactly the
// clocks are known (the latency is only known to be below bound when it
// is smaller than that).
type latency struct {
	s     start
	ns    int64
	bound uint64
	dur   uint64 // the kernel's run time (CUPTI), 0: not known
	cupti bool   // timed from CUPTI's record, not the probe
}

// resolve hands every pending start it can place in time to fn; the rest
// wait for the next calibration (all are placed when final), at most
// staleAfter (now: CLOCK_MONOTONIC ns).
func (t *tracker) resolve(final bool, now uint64, timed func(source, latency), untimed func(source, start)) {
	for src, ps := range t.pending {
		keep := ps[:0]
		for _, s := range ps {
			if s.seqID != 0 {
				// joined once: its launch was stamped before it ran,
				// and the stamps were read after it
				if t.stampOf != nil {
					s.cpu, _ = t.stampOf(src, s.seqID, s.seqIdx)
				}
				s.seqID = 0
				if s.cpu == 0 {
					t.noStamp++
				}
			}
			if s.cpu == 0 {
				untimed(src, s)
				continue
			}
			off, bound, ok := offsetAt(t.clocks[src], s.cpu, final)
			if !ok {
				if final {
					untimed(src, s) // no calibration at all for this context
					continue
				}
				if s.cpu+uint64(staleAfter) < now {
					t.stale++
					untimed(src, s)
					continue
				}
				keep = append(keep, s)
				continue
			}
			timed(src, latency{s: s, ns: int64(s.gpu) - off - int64(s.cpu), bound: bound})
		}
		if len(keep) == 0 {
			delete(t.pending, src)
		} else {
			t.pending[src] = keep
		}
	}
}

// key is what one histogram covers: a kernel, and with --stream a stream
// of one process.
type key struct {
	kernel uint32
	pid    int
	stream uint64
	graph  bool // launched by a CUDA graph (timed from the graph launch)
}

// isGraph says whether a start is a graph kernel's.
func (s start) isGraph() bool { return s.kind == kindGraphWord || s.kind == kindGraphNode }

// stats is one key's latencies.
type stats struct {
	h       *hdrhistogram.Histogram
	log2    toolkit.Log2Hist // microseconds
	n       uint64
	below   uint64                  // below the clock's error bound
	bound   uint64                  // largest error bound of its launches
	untimed uint64                  // starts without a CPU stamp
	cupti   uint64                  // of n, timed from CUPTI's records
	dur     *hdrhistogram.Histogram // run times (CUPTI), nil until one
}

// newHist is one key's histogram, 1 ns to 10 minutes, three significant
// digits (254 KB; a key per kernel and process: the memory grows with the
// kernels a program has, not with time).
func newHist() *hdrhistogram.Histogram { return hdrhistogram.New(1, 600e9, 3) }

func newStats() *stats { return &stats{h: newHist()} }

// addDur records one run time.
func (s *stats) addDur(ns uint64) {
	if s.dur == nil {
		s.dur = newHist()
	}
	s.dur.RecordValue(int64(max(ns, 1)))
}

// runTimes are a kernel's run times' percentiles (CUPTI), in ns.
type runTimes struct{ p50, p90, p99, p999, max uint64 }

// durs returns the run times' percentiles (zeros without any).
func (s *stats) durs() runTimes {
	if s.dur == nil {
		return runTimes{}
	}
	q := func(p float64) uint64 { return uint64(s.dur.ValueAtQuantile(p)) }
	return runTimes{q(50), q(90), q(99), q(99.9), uint64(s.dur.Max())}
}

func (s *stats) add(l latency) {
	s.n++
	s.bound = max(s.bound, l.bound)
	v := l.ns
	if v < int64(l.bound) {
		s.below++
	}
	if v < 1 {
		v = 1
	}
	s.h.RecordValue(v)
	s.log2.Add(uint64(v) / 1000)
}

// quantile returns the latency at q (0-100) and whether it is below the
// clock's error bound (to be shown as "< bound").
func (s *stats) quantile(q float64) (uint64, bool) {
	v := uint64(s.h.ValueAtQuantile(q))
	return v, v < s.bound
}

func (s *stats) max() (uint64, bool) {
	v := uint64(s.h.Max())
	return v, v < s.bound
}

// fmtLat renders a latency, or "< bound" when the clocks cannot tell it
// from zero.
func fmtLat(v uint64, below bool, bound uint64) string {
	if below {
		return "< " + toolkit.FormatNs(bound)
	}
	return toolkit.FormatNs(v)
}
