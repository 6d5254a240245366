package gpuevent_snoop

import (
	"bufio"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gpubpf/gpubpf/pkg/toolkit"
	"github.com/olekukonko/tablewriter"
)

func hex(v uint64) string { return strconv.FormatUint(v, 16) }

// Options of the views.
type Options struct {
	JSON      bool
	Timestamp bool // -T
	Summary   bool // tables instead of the stream
	Args      int  // -a
	Stack     bool // -s
	MinSize   uint64
	Kernels   []string
}

// Tracer turns decoded events into the stream, the summary tables and the
// leak report. It is driven from one goroutine (the ring-buffer reader).
type Tracer struct {
	opt   Options
	w     *bufio.Writer
	res   *Resolver
	buf   []byte
	start uint64 // monotonic ns when tracing started: TIME(s) zero
	wall  int64  // realtime - monotonic, ns
	comms map[[16]byte]string

	Seen, Shown uint64
	// Internal counts driver calls that cudart made on its own, outside
	// any traced runtime call (stream creation, context set-up): not the
	// program's calls, so left out of the stream, tables and leak report.
	Internal uint64
	// unmatched: names of launched kernels -k filtered out, to say which
	// kernels there were when nothing matched.
	unmatched  map[string]bool
	procs      map[uint32]*procStats
	headerDone bool
}

type apiStats struct {
	calls, errors, bytes uint64
	// ns is the time spent in the timed calls: every call but launches
	// reported from their entry alone.
	ns, timed uint64
}

type kernelStats struct {
	name             string
	launches, errors uint64
}

type allocation struct {
	size uint64
	site string
	api  uint8
}

type procStats struct {
	pid     uint32
	comm    string
	apis    [len(apisArray)]apiStats
	kernels map[string]*kernelStats
	live    map[uint64]allocation // device address -> allocation not yet freed
	// liveOver: allocations not kept in live, which held maxLive already
	liveOver uint64
	// copyBytes: bytes copied by direction (dirName), for --prometheus
	copyBytes map[string]uint64
}

// apisArray only gives len(apis) as a constant.
var apisArray [44]struct{}

func init() {
	if len(apisArray) != len(apis) {
		panic(fmt.Sprintf("apisArray has %d entries, apis %d", len(apisArray), len(apis)))
	}
}

// NewTracer writes to w.
func NewTracer(w io.Writer, res *Resolver, opt Options, startMono uint64, wallOffset int64) *Tracer {
	return &Tracer{
		opt: opt, w: bufio.NewWriterSize(w, 256<<10), res: res,
		start: startMono, wall: wallOffset,
		comms: map[[16]byte]string{}, procs: map[uint32]*procStats{},
	}
}

// Flush writes buffered output.
func (t *Tracer) Flush() error { return t.w.Flush() }

func (t *Tracer) proc(e *Event) *procStats {
	p := t.procs[e.PID]
	if p == nil {
		p = &procStats{pid: e.PID, kernels: map[string]*kernelStats{}, live: map[uint64]allocation{}, copyBytes: map[string]uint64{}}
		t.procs[e.PID] = p
	}
	if p.comm == "" || e.TID == e.PID {
		p.comm = t.comm(e)
	}
	return p
}

func (t *Tracer) comm(e *Event) string {
	s, ok := t.comms[e.comm]
	if !ok {
		s = string(e.Comm())
		t.comms[e.comm] = s
	}
	return s
}

// Handle processes one event.
func (t *Tracer) Handle(e *Event) {
	t.Seen++
	if e.API.Driver && isCudartInternal(t.res.Site(e, e.Caller)) {
		t.Internal++
		return
	}
	p := t.proc(e)
	var k *Kernel
	var site string
	freedSize, freedKnown := uint64(0), false
	switch e.API.Kind {
	case KindLaunch, KindGraph:
		k = t.res.KernelName(e)
	case KindMalloc:
		site = t.res.CallSite(e)
		if e.OK() && e.Ptr != 0 {
			if _, ok := p.live[e.Ptr]; ok || len(p.live) < maxLive {
				p.live[e.Ptr] = allocation{size: e.Size, site: site, api: e.APIID}
			} else {
				p.liveOver++
			}
		}
	case KindFree:
		if a, ok := p.live[e.Ptr]; ok {
			freedSize, freedKnown = a.size, true
			if e.OK() {
				delete(p.live, e.Ptr)
			}
		}
	}
	// Filters: -k applies to launches, --min-size to sized calls.
	if k != nil && e.API.Kind == KindLaunch && !matchKernel(k, t.opt.Kernels) {
		if t.unmatched == nil {
			t.unmatched = map[string]bool{}
		}
		if len(t.unmatched) < 1000 {
			t.unmatched[k.Short] = true
		}
		return
	}
	if t.opt.MinSize > 0 {
		sz := e.Size
		if e.API.Kind == KindFree {
			sz = freedSize
		}
		if (e.API.Kind != KindLaunch && e.API.Kind != KindGraph) && sz < t.opt.MinSize {
			return
		}
	}
	t.Shown++
	s := &p.apis[e.APIID]
	s.calls++
	if !e.EntryOnly {
		s.ns += e.Dur
		s.timed++
	}
	if !e.OK() {
		s.errors++
	} else if e.API.Kind == KindFree {
		s.bytes += freedSize
	} else {
		s.bytes += e.Size
		if e.API.Kind == KindMemcpy {
			p.copyBytes[dirName(e.Dir)] += e.Size
		}
	}
	if k != nil {
		ks := p.kernels[k.Demangled]
		if ks == nil {
			ks = &kernelStats{name: k.Demangled}
			p.kernels[k.Demangled] = ks
		}
		ks.launches++
		if !e.OK() {
			ks.errors++
		}
	}
	if t.opt.Summary {
		return
	}
	if t.opt.JSON {
		t.jsonEvent(e, p, k, site, freedSize, freedKnown)
	} else {
		t.textEvent(e, k, site, freedSize, freedKnown)
	}
}

func (t *Tracer) header() {
	if t.headerDone || t.opt.JSON || t.opt.Summary {
		return
	}
	t.headerDone = true
	if t.opt.Timestamp {
		t.w.WriteString("TIME     ")
	}
	fmt.Fprintf(t.w, "%-12s %-7s %-16s %-22s %-4s %s\n", "TIME(s)", "PID", "COMM", "CALL", "RET", "DETAILS")
}

// Header prints the stream's column header (text stream only).
func (t *Tracer) Header() { t.header(); t.w.Flush() }

func appendPad(b []byte, s []byte, width int) []byte {
	b = append(b, s...)
	for i := len(s); i < width; i++ {
		b = append(b, ' ')
	}
	return append(b, ' ')
}

func appendSecs(b []byte, ns uint64) []byte {
	b = strconv.AppendUint(b, ns/1e9, 10)
	b = append(b, '.')
	f := (ns % 1e9) / 1000
	for d := uint64(100000); d > 0; d /= 10 {
		b = append(b, byte('0'+f/d%10))
	}
	return b
}

func appendDur(b []byte, ns uint64) []byte {
	switch {
	case ns < 10_000:
		b = strconv.AppendUint(b, ns, 10)
		return append(b, "ns"...)
	case ns < 10_000_000:
		b = strconv.AppendFloat(b, float64(ns)/1e3, 'f', 1, 64)
		return append(b, "us"...)
	case ns < 10_000_000_000:
		b = strconv.AppendFloat(b, float64(ns)/1e6, 'f', 2, 64)
		return append(b, "ms"...)
	}
	b = strconv.AppendFloat(b, float64(ns)/1e9, 'f', 2, 64)
	return append(b, 's')
}

func appendHex(b []byte, v uint64) []byte {
	b = append(b, '0', 'x')
	return strconv.AppendUint(b, v, 16)
}

// gbps is the copy's bandwidth, meaningful for synchronous copies only: an
// asynchronous call returns once the copy is queued.
func gbps(e *Event) float64 {
	if e.API.Async || e.Dur == 0 || !e.OK() {
		return 0
	}
	return float64(e.Size) / float64(e.Dur)
}

func (t *Tracer) textEvent(e *Event, k *Kernel, site string, freedSize uint64, freedKnown bool) {
	t.header()
	b := t.buf[:0]
	if t.opt.Timestamp {
		b = toolkit.AppendClock(b, time.Unix(0, int64(e.TS)+t.wall))
		b = append(b, ' ')
	}
	n := len(b)
	b = appendSecs(b, e.TS-min(e.TS, t.start))
	for len(b)-n < 12 {
		b = append(b, ' ')
	}
	b = append(b, ' ')
	n = len(b)
	b = strconv.AppendUint(b, uint64(e.PID), 10)
	for len(b)-n < 7 {
		b = append(b, ' ')
	}
	b = append(b, ' ')
	b = appendPad(b, e.Comm(), 16)
	b = appendPad(b, []byte(e.API.Name), 22)
	if e.EntryOnly {
		b = append(b, "-    "...)
	} else if e.OK() {
		b = append(b, "OK   "...)
	} else {
		b = append(b, "FAIL "...)
		b = append(b, errorName(e.API.Driver, e.Ret)...)
		b = append(b, '(')
		b = strconv.AppendInt(b, int64(e.Ret), 10)
		b = append(b, ") "...)
	}
	switch e.API.Kind {
	case KindMalloc:
		b = append(b, "size="...)
		b = strconv.AppendUint(b, e.Size, 10)
		if e.OK() {
			b = append(b, " ptr="...)
			b = appendHex(b, e.Ptr)
		}
	case KindFree:
		b = append(b, "ptr="...)
		b = appendHex(b, e.Ptr)
		if freedKnown {
			b = append(b, " size="...)
			b = strconv.AppendUint(b, freedSize, 10)
		}
	case KindMemcpy:
		b = append(b, dirName(e.Dir)...)
		b = append(b, ' ')
		b = strconv.AppendUint(b, e.Size, 10)
		b = append(b, " bytes"...)
		if e.API.Async {
			b = append(b, " async"...)
		} else {
			b = append(b, " sync"...)
		}
	case KindMemset:
		b = append(b, "ptr="...)
		b = appendHex(b, e.Ptr)
		b = append(b, " value="...)
		b = strconv.AppendUint(b, e.Value, 10)
		b = append(b, ' ')
		b = strconv.AppendUint(b, e.Size, 10)
		b = append(b, " bytes"...)
	case KindLaunch:
		b = append(b, k.Short...)
		b = append(b, " grid=("...)
		b = strconv.AppendUint(b, uint64(e.Grid[0]), 10)
		b = append(b, ',')
		b = strconv.AppendUint(b, uint64(e.Grid[1]), 10)
		b = append(b, ',')
		b = strconv.AppendUint(b, uint64(e.Grid[2]), 10)
		b = append(b, ") block=("...)
		b = strconv.AppendUint(b, uint64(e.Block[0]), 10)
		b = append(b, ',')
		b = strconv.AppendUint(b, uint64(e.Block[1]), 10)
		b = append(b, ',')
		b = strconv.AppendUint(b, uint64(e.Block[2]), 10)
		b = append(b, ") shmem="...)
		b = strconv.AppendUint(b, e.Shmem, 10)
	case KindGraph:
		b = append(b, "exec="...)
		b = appendHex(b, e.Func)
	}
	if e.API.Stream >= 0 || e.API.Kind == KindLaunch {
		b = append(b, " stream="...)
		b = appendHex(b, e.Stream)
	}
	if !e.EntryOnly {
		b = append(b, ' ')
		b = appendDur(b, e.Dur)
	}
	if e.API.Kind == KindMemcpy {
		if g := gbps(e); g > 0 {
			b = append(b, ' ')
			b = strconv.AppendFloat(b, g, 'f', 2, 64)
			b = append(b, " GB/s"...)
		}
	}
	if site != "" {
		b = append(b, " caller="...)
		b = append(b, site...)
	}
	if args := e.Args(); len(args) > 0 {
		b = append(b, " args=["...)
		for i, a := range args {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendHex(b, a)
		}
		b = append(b, ']')
	}
	b = append(b, '\n')
	if e.NStack > 0 {
		for _, f := range t.res.Stack(e, e.Stack()) {
			b = append(b, "        "...)
			b = append(b, f...)
			b = append(b, '\n')
		}
	}
	t.buf = b
	t.w.Write(b)
}

func (t *Tracer) jsonEvent(e *Event, p *procStats, k *Kernel, site string, freedSize uint64, freedKnown bool) {
	b := t.buf[:0]
	b = append(b, `{"type":`...)
	b = toolkit.AppendJSONString(b, e.API.Kind.String())
	b = append(b, `,"time_ns":`...)
	b = strconv.AppendInt(b, int64(e.TS)+t.wall, 10)
	b = append(b, `,"pid":`...)
	b = strconv.AppendUint(b, uint64(e.PID), 10)
	b = append(b, `,"tid":`...)
	b = strconv.AppendUint(b, uint64(e.TID), 10)
	b = append(b, `,"comm":`...)
	b = toolkit.AppendJSONString(b, t.comm(e))
	b = append(b, `,"api":"`...)
	b = append(b, e.API.Name...)
	if e.API.Driver {
		b = append(b, `","layer":"driver","ret":`...)
	} else {
		b = append(b, `","layer":"runtime","ret":`...)
	}
	// A launch reported from its entry alone has no result or duration.
	if e.EntryOnly {
		b = append(b, `null,"error":null,"dur_ns":null`...)
	} else {
		b = strconv.AppendInt(b, int64(e.Ret), 10)
		b = append(b, `,"error":"`...)
		if !e.OK() {
			b = append(b, errorName(e.API.Driver, e.Ret)...)
		}
		b = append(b, `","dur_ns":`...)
		b = strconv.AppendUint(b, e.Dur, 10)
	}
	switch e.API.Kind {
	case KindMalloc:
		b = append(b, `,"size":`...)
		b = strconv.AppendUint(b, e.Size, 10)
		b = append(b, `,"ptr":"`...)
		b = appendHex(b, e.Ptr)
		b = append(b, '"')
	case KindFree:
		b = append(b, `,"ptr":"`...)
		b = appendHex(b, e.Ptr)
		b = append(b, `","size":`...)
		if freedKnown {
			b = strconv.AppendUint(b, freedSize, 10)
		} else {
			b = append(b, "null"...)
		}
	case KindMemcpy:
		b = append(b, `,"kind":"`...)
		b = append(b, dirName(e.Dir)...)
		b = append(b, `","bytes":`...)
		b = strconv.AppendUint(b, e.Size, 10)
		b = append(b, `,"dst":"`...)
		b = appendHex(b, e.Dst)
		b = append(b, `","src":"`...)
		b = appendHex(b, e.Src)
		b = append(b, `","sync":`...)
		b = strconv.AppendBool(b, !e.API.Async)
		b = append(b, `,"gbps":`...)
		b = strconv.AppendFloat(b, gbps(e), 'f', 3, 64)
	case KindMemset:
		b = append(b, `,"ptr":"`...)
		b = appendHex(b, e.Ptr)
		b = append(b, `","value":`...)
		b = strconv.AppendUint(b, e.Value, 10)
		b = append(b, `,"bytes":`...)
		b = strconv.AppendUint(b, e.Size, 10)
	case KindLaunch:
		b = append(b, `,"kernel":`...)
		b = toolkit.AppendJSONString(b, k.Demangled)
		b = append(b, `,"kernel_mangled":`...)
		b = toolkit.AppendJSONString(b, k.Mangled)
		b = append(b, `,"func":"`...)
		b = appendHex(b, e.Func)
		b = append(b, `","grid":[`...)
		for i, v := range e.Grid {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendUint(b, uint64(v), 10)
		}
		b = append(b, `],"block":[`...)
		for i, v := range e.Block {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendUint(b, uint64(v), 10)
		}
		b = append(b, `],"shmem":`...)
		b = strconv.AppendUint(b, e.Shmem, 10)
		if args := e.Args(); len(args) > 0 {
			b = append(b, `,"args":[`...)
			for i, a := range args {
				if i > 0 {
					b = append(b, ',')
				}
				b = append(b, '"')
				b = appendHex(b, a)
				b = append(b, '"')
			}
			b = append(b, ']')
		}
	case KindGraph:
		b = append(b, `,"graph_exec":"`...)
		b = appendHex(b, e.Func)
		b = append(b, '"')
	}
	if e.API.Stream >= 0 || e.API.Kind == KindLaunch {
		b = append(b, `,"stream":"`...)
		b = appendHex(b, e.Stream)
		b = append(b, '"')
	}
	if site != "" {
		b = append(b, `,"caller":`...)
		b = toolkit.AppendJSONString(b, site)
	}
	if e.NStack > 0 {
		b = append(b, `,"stack":[`...)
		for i, f := range t.res.Stack(e, e.Stack()) {
			if i > 0 {
				b = append(b, ',')
			}
			b = toolkit.AppendJSONString(b, f)
		}
		b = append(b, ']')
	}
	b = append(b, "}\n"...)
	t.buf = b
	t.w.Write(b)
}

func (t *Tracer) sortedProcs() []*procStats {
	ps := make([]*procStats, 0, len(t.procs))
	for _, p := range t.procs {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].pid < ps[j].pid })
	return ps
}

func fmtBytes(n uint64) string {
	switch {
	case n >= 1<<30:
		return strconv.FormatFloat(float64(n)/(1<<30), 'f', 2, 64) + " GiB"
	case n >= 1<<20:
		return strconv.FormatFloat(float64(n)/(1<<20), 'f', 2, 64) + " MiB"
	case n >= 1<<10:
		return strconv.FormatFloat(float64(n)/(1<<10), 'f', 2, 64) + " KiB"
	}
	return strconv.FormatUint(n, 10) + " B"
}

func fmtDur(ns uint64) string { return string(appendDur(nil, ns)) }

// PrintSummary prints the per-process tables (--summary, each -i interval)
// and, if reset, starts the next interval from zero.
func (t *Tracer) PrintSummary(reset bool, now time.Time) {
	for _, p := range t.sortedProcs() {
		if t.opt.JSON {
			for i := range p.apis {
				s := &p.apis[i]
				if s.calls == 0 {
					continue
				}
				b := t.buf[:0]
				b = append(b, `{"type":"summary","pid":`...)
				b = strconv.AppendUint(b, uint64(p.pid), 10)
				b = append(b, `,"comm":`...)
				b = toolkit.AppendJSONString(b, p.comm)
				b = append(b, `,"api":"`...)
				b = append(b, apis[i].Name...)
				b = fmt.Appendf(b, `","calls":%d,"errors":%d,"bytes":%d,"time_ns":%d,"timed_calls":%d}`+"\n", s.calls, s.errors, s.bytes, s.ns, s.timed)
				t.buf = b
				t.w.Write(b)
			}
			for _, ks := range topKernels(p, 0) {
				b := t.buf[:0]
				b = append(b, `{"type":"kernel","pid":`...)
				b = strconv.AppendUint(b, uint64(p.pid), 10)
				b = append(b, `,"kernel":`...)
				b = toolkit.AppendJSONString(b, ks.name)
				b = fmt.Appendf(b, `,"launches":%d,"errors":%d}`+"\n", ks.launches, ks.errors)
				t.buf = b
				t.w.Write(b)
			}
		} else {
			stamp := ""
			if t.opt.Timestamp {
				stamp = string(toolkit.AppendClock(nil, now)) + " "
			}
			fmt.Fprintf(t.w, "\n%sPID %d (%s): CUDA API calls\n", stamp, p.pid, p.comm)
			tb := tablewriter.NewTable(t.w)
			tb.Header("API", "CALLS", "ERRORS", "BYTES", "TOTAL TIME", "AVG TIME")
			for i := range p.apis {
				s := &p.apis[i]
				if s.calls == 0 {
					continue
				}
				bytes := "-"
				if apis[i].Kind != KindLaunch && apis[i].Kind != KindGraph {
					bytes = fmtBytes(s.bytes)
				}
				total, avg := s.times()
				tb.Append(apis[i].Name, strconv.FormatUint(s.calls, 10), strconv.FormatUint(s.errors, 10),
					bytes, total, avg)
			}
			tb.Render()
			if ks := topKernels(p, 10); len(ks) > 0 {
				fmt.Fprintf(t.w, "PID %d (%s): top kernels by launches\n", p.pid, p.comm)
				tb := tablewriter.NewTable(t.w)
				tb.Header("KERNEL", "LAUNCHES", "ERRORS")
				for _, k := range ks {
					tb.Append(truncate(k.name, 60), strconv.FormatUint(k.launches, 10), strconv.FormatUint(k.errors, 10))
				}
				tb.Render()
			}
		}
		if reset {
			p.apis = [len(apisArray)]apiStats{}
			p.kernels = map[string]*kernelStats{}
		}
	}
	t.w.Flush()
}

// times renders the total and average time of an API's calls. When only
// some were timed (launches whose return was taken), both are estimates
// from those, marked "~".
func (s *apiStats) times() (total, avg string) {
	switch {
	case s.timed == 0:
		return "-", "-"
	case s.timed == s.calls:
		return fmtDur(s.ns), fmtDur(s.ns / s.calls)
	}
	mean := float64(s.ns) / float64(s.timed)
	return "~" + fmtDur(uint64(mean*float64(s.calls))), "~" + fmtDur(uint64(mean))
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}

func topKernels(p *procStats, n int) []*kernelStats {
	ks := make([]*kernelStats, 0, len(p.kernels))
	for _, k := range p.kernels {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool {
		if ks[i].launches != ks[j].launches {
			return ks[i].launches > ks[j].launches
		}
		return ks[i].name < ks[j].name
	})
	if n > 0 && len(ks) > n {
		ks = ks[:n]
	}
	return ks
}

// Leak is a call site's allocations that were never freed.
type Leak struct {
	PID    uint32
	Comm   string
	Site   string
	API    string
	Allocs uint64
	Bytes  uint64
	Ptrs   []uint64
}

// maxLive bounds the allocations a process's live set holds (about 100 MB
// at a million): frees the tool never sees (not traced, their records
// dropped, memory released another way) would grow it for ever.
const maxLive = 1 << 20

// Leaks groups the live allocations by process and call site, largest first.
func (t *Tracer) Leaks() []Leak {
	var out []Leak
	for _, p := range t.sortedProcs() {
		groups := map[string]*Leak{}
		for ptr, a := range p.live {
			if a.size < t.opt.MinSize {
				continue
			}
			key := a.site + "\x00" + apis[a.api].Name
			l := groups[key]
			if l == nil {
				l = &Leak{PID: p.pid, Comm: p.comm, Site: a.site, API: apis[a.api].Name}
				groups[key] = l
			}
			l.Allocs++
			l.Bytes += a.size
			l.Ptrs = append(l.Ptrs, ptr)
		}
		var ls []Leak
		for _, l := range groups {
			sort.Slice(l.Ptrs, func(i, j int) bool { return l.Ptrs[i] < l.Ptrs[j] })
			ls = append(ls, *l)
		}
		sort.Slice(ls, func(i, j int) bool {
			if ls[i].Bytes != ls[j].Bytes {
				return ls[i].Bytes > ls[j].Bytes
			}
			return ls[i].Site < ls[j].Site
		})
		out = append(out, ls...)
	}
	return out
}

// PrintLeaks prints the leak report.
func (t *Tracer) PrintLeaks() {
	leaks := t.Leaks()
	if t.opt.JSON {
		for _, l := range leaks {
			b := t.buf[:0]
			b = fmt.Appendf(b, `{"type":"leak","pid":%d,"comm":`, l.PID)
			b = toolkit.AppendJSONString(b, l.Comm)
			b = append(b, `,"site":`...)
			b = toolkit.AppendJSONString(b, l.Site)
			b = fmt.Appendf(b, `,"api":"%s","allocs":%d,"bytes":%d,"ptrs":[`, l.API, l.Allocs, l.Bytes)
			for i, p := range l.Ptrs {
				if i > 0 {
					b = append(b, ',')
				}
				b = append(b, '"')
				b = appendHex(b, p)
				b = append(b, '"')
			}
			b = append(b, "]}\n"...)
			t.buf = b
			t.w.Write(b)
		}
		t.w.Flush()
		return
	}
	var over uint64
	for _, p := range t.procs {
		over += p.liveOver
	}
	if over > 0 {
		fmt.Fprintf(t.w, "\n%d allocations not tracked for leaks: a process already had %d live (frees not traced, or their records dropped?)\n", over, maxLive)
	}
	if len(leaks) == 0 {
		if over == 0 {
			fmt.Fprintf(t.w, "\nNo leaks: every traced device allocation was freed.\n")
		}
		t.w.Flush()
		return
	}
	var total, n uint64
	for _, l := range leaks {
		total += l.Bytes
		n += l.Allocs
	}
	fmt.Fprintf(t.w, "\nLeaks: %d device allocations (%s) never freed, by call site:\n", n, fmtBytes(total))
	tb := tablewriter.NewTable(t.w)
	tb.Header("PID", "COMM", "CALL SITE", "API", "ALLOCS", "BYTES")
	for _, l := range leaks {
		tb.Append(strconv.FormatUint(uint64(l.PID), 10), l.Comm, truncate(l.Site, 44), l.API,
			strconv.FormatUint(l.Allocs, 10), strconv.FormatUint(l.Bytes, 10))
	}
	tb.Render()
	t.w.Flush()
}

// kindList parses -e.
func kindList(s string) (mask uint32, err error) {
	if s == "" || s == "all" {
		return 1<<numKinds - 1, nil
	}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		found := false
		for i, n := range kindNames {
			if f == n {
				mask |= 1 << i
				found = true
			}
		}
		if !found {
			return 0, toolkit.Usagef("unknown event kind %q in -e: use a comma-separated list of %s", f, strings.Join(kindNames[:], ","))
		}
	}
	return mask, nil
}

// isCudartInternal reports whether a driver call's call site is inside the
// CUDA runtime: libcudart.so*, or static cudart's functions in an executable
// (the runtime API entry points cuda*, its internal cudart:: and __cuda*
// functions, and CUDA 13's libcudart_static_<hash> ones).
func isCudartInternal(site string) bool {
	return strings.HasPrefix(site, "cudart::") || strings.HasPrefix(site, "__cuda") ||
		strings.HasPrefix(site, "libcudart_static_") ||
		strings.Contains(site, "(libcudart.so") || strings.HasPrefix(site, "libcudart.so") ||
		(strings.HasPrefix(site, "cuda") && len(site) > 4 && site[4] >= 'A' && site[4] <= 'Z')
}

// KernelCounts returns how many distinct kernels were launched (shown) and
// how many of them have no symbol name (driver handles, stripped objects).
func (t *Tracer) KernelCounts() (named, unnamed int) {
	for _, p := range t.procs {
		for name := range p.kernels {
			if strings.HasPrefix(name, "CUfunction:") || strings.HasPrefix(name, "graph:") ||
				strings.HasPrefix(name, "0x") || strings.Contains(name, "+0x") {
				unnamed++
			} else {
				named++
			}
		}
	}
	return named, unnamed
}

// PIDs lists the processes that sent events.
func (t *Tracer) PIDs() []uint32 {
	out := make([]uint32, 0, len(t.procs))
	for pid := range t.procs {
		out = append(out, pid)
	}
	return out
}

// Launches counts the launches traced (all processes).
func (t *Tracer) Launches() uint64 {
	var n uint64
	for _, p := range t.procs {
		for i := range p.apis {
			if apis[i].Kind == KindLaunch && !apis[i].Lookup {
				n += p.apis[i].calls
			}
		}
	}
	return n
}

// costFacts is what the cost hint at exit is made of.
type costFacts struct {
	launches      uint64
	secs          float64
	hitsPerLaunch float64
	mode          attachMode
	launchEntry   bool
	driverWhy     string   // why the driver's launch functions are probed ("" if not)
	stepped       []string // launch APIs hit whose probe the kernel single-steps
}

// costHint tells users of launch-heavy programs where the probe cost per
// launch comes from, when it is above one hit: "" when the rate is low or
// nothing can be done.
func costHint(c costFacts) string {
	if c.secs <= 0 || c.launches < 10000 || float64(c.launches)/c.secs < 20000 {
		return ""
	}
	var why []string
	if c.hitsPerLaunch > 1.5 && c.driverWhy != "" {
		why = append(why, "the driver's launch functions are probed as well ("+c.driverWhy+"), so a runtime launch hits two probes")
	}
	if c.mode != modeSession && !c.launchEntry {
		why = append(why, "this kernel has no uprobe sessions (Linux 6.13+), so every launch's return is probed; --launch-entry reports launches from their entry alone")
	}
	if len(c.stepped) > 0 {
		why = append(why, "the kernel single-steps the probed first instruction of "+strings.Join(c.stepped, ", ")+" (two traps per hit)")
	}
	if len(why) == 0 {
		return ""
	}
	return fmt.Sprintf("%d launches traced (%.0f/s) at %.2f probe hits per launch: %s",
		c.launches, float64(c.launches)/c.secs, c.hitsPerLaunch, strings.Join(why, "; "))
}

// Unmatched lists (sorted, at most n) kernels that -k left out.
func (t *Tracer) Unmatched(n int) []string {
	out := make([]string, 0, len(t.unmatched))
	for k := range t.unmatched {
		out = append(out, k)
	}
	sort.Strings(out)
	if len(out) > n {
		out = out[:n]
	}
	return out
}
