package toolkit

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/urfave/cli/v2"

	"github.com/gpubpf/gpubpf/pkg/promexport"
	"github.com/gpubpf/gpubpf/pkg/runtime"
	"github.com/gpubpf/gpubpf/pkg/runtime/agentproto"
	"github.com/gpubpf/gpubpf/pkg/runtime/fatbin"
	"github.com/gpubpf/gpubpf/pkg/runtime/graphs"
	"github.com/gpubpf/gpubpf/pkg/runtime/instrument"
)

// GPUTool is what a GPU-side tool (threadhist, kernelretsnoop,
// kernel_trace) adds to the shared runner: its BPF collection and how it
// renders what comes back. Target selection, the start line, -i/-d/-T,
// signals, the kernel selection and the completeness line are RunGPU's.
type GPUTool struct {
	Name string
	// Spec is the tool's BPF collection (bpf2go), constants already set.
	Spec *ebpf.CollectionSpec
	// Programs keeps only these programs of Spec (nil: all).
	Programs []string
	// What is the start line's subject: "Tracing GPU kernel exits".
	What string
	// Maps are the GPU maps Report reads (per interval and at the end).
	Maps []string
	// Batch, if set, receives the ring-buffer records (raw-event modes); the
	// batch is released when it returns, so it must keep no record.
	Batch func(*runtime.Batch)
	// Report renders one interval (final: the end of the trace). It is
	// never called concurrently.
	Report func(r *Report)
	// Account adds the tool's own clauses to the completeness line: at
	// the end, after the final Report, and with --prometheus/--otlp every
	// refresh, after Metrics (each must leave the numbers it needs).
	Account func(a *Account, st runtime.Stats)
	// Metrics sets the tool's numbers in r.Exporter's instruments
	// (--prometheus, --otlp) from a report of the totals so far: every
	// 10 s while tracing, and at the end.
	Metrics func(r *Report)
}

// Report is one reading of the tool's maps: summed over every process and
// device traced, and as the change since the last report with -i.
type Report struct {
	Session *runtime.Session
	Now     time.Time
	Final   bool
	// Interval is true with -i: values are the change since the last
	// report (bcc's "print and reset").
	Interval bool
	Stamp    bool
	JSON     bool
	W        io.Writer
	maps     map[string][]uint64
	totals   map[string][]uint64
	// by device: the same, for Devices and ForDevice (--per-device)
	devMaps, devTotals map[int]map[string][]uint64
	names              func(uint32) string // NewReport's, instead of the session's
	// Exporter: set in a report for GPUTool.Metrics
	Exporter *promexport.Exporter
}

// NewReport is the final report of the given maps' values by device (their
// totals summed over the devices), with kernel index i named names(i): for
// a tool's tests.
func NewReport(w io.Writer, json bool, names func(uint32) string, byDevice map[int]map[string][]uint64) *Report {
	// through the reporter's own sums, as a reading of one copy per device
	o := &reporter{byCopy: map[copyKey][]byte{}}
	for d, m := range byDevice {
		for name, vals := range m {
			b := make([]byte, 8*len(vals))
			for i, v := range vals {
				binary.LittleEndian.PutUint64(b[i*8:], v)
			}
			o.byCopy[copyKey{name: name, device: d}] = b
		}
	}
	o.sum()
	return &Report{Now: time.Now(), Final: true, JSON: json, W: w, maps: o.cur, totals: o.cur, names: names,
		devMaps: o.devCur, devTotals: o.devCur}
}

// EachDevice calls fn with rep (dev -1: every device summed), or with
// perDevice (--per-device) once for each device's report.
func EachDevice(rep *Report, perDevice bool, fn func(r *Report, dev int)) {
	if !perDevice {
		fn(rep, -1)
		return
	}
	for _, d := range rep.Devices() {
		fn(rep.ForDevice(d), d)
	}
}

// DeviceLabel is the device label of EachDevice's dev in the metrics:
// "all" for every device summed, else its number.
func DeviceLabel(dev int) string {
	if dev < 0 {
		return "all"
	}
	return strconv.Itoa(dev)
}

// Devices are the devices whose maps were read, in order.
func (r *Report) Devices() []int {
	return slices.Sorted(maps.Keys(r.devTotals))
}

// ForDevice is the report of device d alone: its maps summed over the
// processes (and contexts) that used it.
func (r *Report) ForDevice(d int) *Report {
	c := *r
	c.maps, c.totals = r.devMaps[d], r.devTotals[d]
	if c.maps == nil {
		c.maps = map[string][]uint64{}
	}
	c.devMaps, c.devTotals = nil, nil
	return &c
}

// Total is map name's values since the trace began (U64 without -i).
func (r *Report) Total(name string) []uint64 { return r.totals[name] }

// U64 is map name's values as 64-bit words (GPU arrays: value i of an
// 8-byte-valued array is word i), summed over processes and devices.
func (r *Report) U64(name string) []uint64 { return r.maps[name] }

// Kernel names kernel index i (bpf_gpu_kernel_index): the demangled base
// name and the mangled one.
func (r *Report) Kernel(i uint32) (base, mangled string) {
	if r.names != nil {
		return KernelNames(r.names(i))
	}
	return KernelNames(r.Session.KernelName(i))
}

// KernelNames is the demangled base name of a mangled kernel name (the
// mangled name when it does not demangle), and the mangled name; an empty
// name (an index no session knows) is "(unknown kernel)".
func KernelNames(mangled string) (base, m string) {
	if mangled == "" {
		return "(unknown kernel)", ""
	}
	base, _ = fatbin.Demangle(mangled)
	if base == "" {
		base = mangled
	}
	return base, mangled
}

// Prefix is the -T clock stamp ("" without -T).
func (r *Report) Prefix() string {
	if r.Stamp {
		return r.Now.Format("15:04:05") + " "
	}
	return ""
}

// SetVariables sets a tool's `const volatile` knobs before loading; each
// value must have its variable's own type (uint32, uint64).
func SetVariables(spec *ebpf.CollectionSpec, vars map[string]any) error {
	for name, v := range vars {
		vs := spec.Variables[name]
		if vs == nil {
			return fmt.Errorf("configuring the BPF program: it has no variable %s (rebuild with make generate)", name)
		}
		if err := vs.Set(v); err != nil {
			return fmt.Errorf("configuring the BPF program (%s): %w", name, err)
		}
	}
	return nil
}

// FormatNs renders a duration in nanoseconds for tables: "750 ns",
// "12.5 us", "3.40 ms", "1.20 s".
func FormatNs(ns uint64) string {
	switch {
	case ns >= 1e9:
		return strconv.FormatFloat(float64(ns)/1e9, 'f', 2, 64) + " s"
	case ns >= 1e6:
		return strconv.FormatFloat(float64(ns)/1e6, 'f', 2, 64) + " ms"
	case ns >= 1e4:
		return strconv.FormatFloat(float64(ns)/1e3, 'f', 1, 64) + " us"
	}
	return strconv.FormatUint(ns, 10) + " ns"
}

// RunGPU runs t as CLI.md describes: `TOOL [flags] -- CMD`, `-p PID`, or
// every agent process; until the command exits, -d passes or Ctrl-C.
func RunGPU(c *cli.Context, t GPUTool) error {
	targets, err := TargetsOf(c, c.Args().Slice())
	if err != nil {
		return err
	}
	ringBytes, err := RingBytesOf(c)
	if err != nil {
		return err
	}
	sess, err := runtime.Open(t.Spec, runtime.Options{Programs: t.Programs, Kernels: KernelPatterns(c), Client: t.Name, Log: LogOf(c), Warn: WarnOf(t.Name), NoInject: c.Bool(FlagNoInject), Devices: DevicesOf(c), RingWait: RingWaitOf(c), RingBytes: ringBytes})
	if err != nil {
		return err
	}
	defer sess.Close()
	jsonOut := c.Bool(FlagJSON)
	if !jsonOut {
		StartLine(os.Stderr, fmt.Sprintf("%s of %s %s", t.What, KernelsWhat(c), targets.Describe()))
	}
	ctx, stop := TraceContext(c)
	defer stop()
	out := &reporter{t: t, sess: sess, w: os.Stdout, stamp: c.Bool(FlagTimestamp), json: jsonOut, interval: c.Float64(FlagInterval) > 0}
	metricsDone := closed
	if t.Metrics != nil {
		exp, err := StartExporter(c, t.Name)
		if err != nil {
			return err
		}
		if exp != nil {
			defer func() {
				if err := exp.Close(); err != nil {
					fmt.Fprintf(os.Stderr, "%s: %v\n", t.Name, err)
				}
			}()
			out.exp = exp
			metricsDone = Every(ctx, MetricsEvery, func() {
				out.read()
				out.metrics()
				// the account as the trace goes: the tool's clauses (its
				// Metrics took their numbers) and the runtime's
				t.account(sess.Stats()).Export(exp)
			})
		}
	}
	batchesDone := make(chan struct{})
	if t.Batch != nil {
		batches := sess.Batches()
		go func() {
			defer close(batchesDone)
			for b := range batches {
				t.Batch(b)
				b.Release()
			}
		}()
	} else {
		close(batchesDone)
	}
	tickDone := closed
	if iv := c.Float64(FlagInterval); iv > 0 {
		tickDone = Every(ctx, time.Duration(iv*float64(time.Second)), func() { out.report(false) })
	}
	code, traceErr := sess.Trace(ctx, targets)
	stop()
	<-tickDone
	<-metricsDone
	// Maps are read before detaching: a process still running keeps its
	// device memory only while attached (the runtime keeps the last copy of
	// the ones that exited).
	out.read()
	closeErr := sess.Close()
	<-batchesDone
	st := sess.Stats()
	if traceErr != nil && st.Processes == 0 {
		// Nothing was traced: the error alone says what happened.
		return traceErr
	}
	out.report(true)
	out.metrics()
	a := t.account(st)
	a.Export(out.exp)
	if !jsonOut {
		fmt.Fprintln(os.Stderr, a.String())
		for _, f := range st.ProbeFailures {
			fmt.Fprintln(os.Stderr, t.Name+": "+f)
		}
	} else {
		os.Stdout.Write(GraphsJSON(st))
		os.Stdout.Write(SanitizerJSON(st))
	}
	return Finish(t.Name, targets, sess, st, code, traceErr, closeErr)
}

// reporter reads the tool's maps and hands them to Report, as deltas with -i.
type reporter struct {
	mu       sync.Mutex
	t        GPUTool
	sess     *runtime.Session
	w        io.Writer
	stamp    bool
	json     bool
	interval bool
	last     map[string][]uint64
	cur      map[string][]uint64
	byCopy   map[copyKey][]byte
	// by device, for --per-device
	devLast, devCur map[int]map[string][]uint64
	exp             *promexport.Exporter // --prometheus, --otlp
}

// closed is a channel closed from the start: a loop that never ran.
var closed <-chan struct{} = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Every calls fn every d until ctx ends; the channel closes once it has
// stopped (fn is not running).
func Every(ctx context.Context, d time.Duration, fn func()) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		tk := time.NewTicker(d)
		defer tk.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tk.C:
				fn()
			}
		}
	}()
	return done
}

// MetricsEvery is how often a GPU tool's metrics are refreshed while it
// traces (a scrape or push in between sees the last ones).
const MetricsEvery = 10 * time.Second

// metrics hands the totals so far to the tool's Metrics (o.exp set).
func (o *reporter) metrics() {
	if o.exp == nil || o.t.Metrics == nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	r := &Report{Session: o.sess, Now: time.Now(), Final: true, W: io.Discard, maps: o.cur, totals: o.cur,
		devMaps: o.devCur, devTotals: o.devCur, Exporter: o.exp}
	if r.maps == nil {
		r.maps = map[string][]uint64{}
	}
	o.t.Metrics(r)
}

type copyKey struct {
	name        string
	pid, device int
	ctx         uint64
}

// read takes the current totals of the tool's maps.
func (o *reporter) read() {
	o.mu.Lock()
	defer o.mu.Unlock()
	copies, err := o.sess.ReadMaps(o.t.Maps...)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", o.t.Name, err)
	}
	if o.byCopy == nil {
		o.byCopy = map[copyKey][]byte{}
	}
	for _, mc := range copies {
		// The latest reading of each copy stands for it; a process that
		// has gone keeps its last one, so totals never go backwards.
		o.byCopy[copyKey{mc.Name, mc.PID, mc.Device, mc.Ctx}] = mc.Values()
	}
	o.sum()
}

// sum adds the copies up, in all and by device (o.mu held).
func (o *reporter) sum() {
	sums := map[string][]uint64{}
	byDev := map[int]map[string][]uint64{}
	for k, vals := range o.byCopy {
		addWords(sums, k.name, vals)
		if byDev[k.device] == nil {
			byDev[k.device] = map[string][]uint64{}
		}
		addWords(byDev[k.device], k.name, vals)
	}
	o.cur, o.devCur = sums, byDev
}

// addWords adds vals, read as little-endian 64-bit words, into sums[name].
func addWords(sums map[string][]uint64, name string, vals []byte) {
	s := sums[name]
	if len(s) < len(vals)/8 {
		s = append(s, make([]uint64, len(vals)/8-len(s))...)
	}
	for i := range len(vals) / 8 {
		s[i] += binary.LittleEndian.Uint64(vals[i*8:])
	}
	sums[name] = s
}

// deltas are cur's values less last's (a value that went down, a process
// whose copy was replaced, counts whole).
func deltas(cur, last map[string][]uint64) map[string][]uint64 {
	delta := map[string][]uint64{}
	for name, c := range cur {
		d := make([]uint64, len(c))
		prev := last[name]
		for i, v := range c {
			if i < len(prev) && v >= prev[i] {
				d[i] = v - prev[i]
			} else {
				d[i] = v
			}
		}
		delta[name] = d
	}
	return delta
}

func (o *reporter) report(final bool) {
	if !final {
		o.read()
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	r := &Report{Session: o.sess, Now: time.Now(), Final: final, Interval: o.interval, Stamp: o.stamp, JSON: o.json, W: o.w, maps: o.cur, totals: o.cur,
		devMaps: o.devCur, devTotals: o.devCur}
	if o.interval {
		r.maps = deltas(o.cur, o.last)
		o.last = o.cur
		r.devMaps = map[int]map[string][]uint64{}
		for d, cur := range o.devCur {
			r.devMaps[d] = deltas(cur, o.devLast[d])
		}
		o.devLast = o.devCur
	}
	if r.maps == nil {
		r.maps = map[string][]uint64{}
	}
	o.t.Report(r)
}

// account is the completeness line: the tool's own clauses, then the
// runtime's.
func (t GPUTool) account(st runtime.Stats) *Account {
	a := &Account{Tool: t.Name}
	if t.Account != nil {
		t.Account(a, st)
	}
	KernelAccount(a, st)
	return a
}

// KernelAccount adds the kernel clauses of the completeness line: kernels
// instrumented, launches, kernels skipped and why, and any GPU records.
func KernelAccount(a *Account, st runtime.Stats) {
	a.Add(uint64(len(st.KernelsMatched)), "kernels instrumented", "")
	a.Add(st.Launches, "instrumented launches", "")
	if c := SanitizerAccount(st); c != "" {
		a.Note(c)
	}
	if st.LaunchFailures > 0 {
		a.Add(st.LaunchFailures, "launches refused by the driver", "the original kernel ran")
	}
	if len(st.KernelsSkipped) > 0 {
		a.Note(SkippedAccount(st.KernelsSkipped))
	}
	for _, what := range st.NotTraced {
		a.Note("not traced: " + what)
	}
	if c := graphs.Sum(st.Graphs).Clause(); c != "" {
		a.Note(c)
	}
	if st.RecordsProduced > 0 || st.RingPending > 0 {
		a.Note(RecordAccount(st))
	}
	if st.LoopBudgetSpent > 0 {
		a.Add(st.LoopBudgetSpent, LoopBudgetWhat, LoopBudgetWhy)
	}
}

// GraphsJSON is the {"type":"graphs",...} line of every GPU tool's -j
// output: the CUDA graphs launched during the trace (graphs.Totals), and
// each group of launches that ran the original kernel nodes with why.
func GraphsJSON(st runtime.Stats) []byte {
	t := graphs.Sum(st.Graphs)
	b := fmt.Appendf(nil, `{"type":"graphs","execs":%d,"launches":%d,"launches_instrumented":%d,"launches_cupti":%d,"kernel_runs":%d,"kernel_runs_instrumented":%d,"launches_unknown":%d,"launches_captured":%d,"not_instrumented":[`,
		t.Execs, t.Launches, t.LaunchesInstrumented, t.LaunchesKernelTimes, t.KernelRuns, t.KernelRunsInstrumented, t.LaunchesUnknown, t.Captured)
	for i, g := range t.NotInstrumented {
		if i > 0 {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, `{"execs":%d,"launches":%d,"kernel_nodes":%d,"pids":[`, g.Execs, g.Launches, g.KernelNodes)
		for j, pid := range g.PIDs {
			if j > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, int64(pid), 10)
		}
		b = append(b, `],"why":`...)
		b = AppendJSONString(b, g.Why)
		b = append(b, '}')
	}
	return append(b, "]}\n"...)
}

// The loop-budget clause, worded once for the tools' accounts and gpubpf
// run's summary (the GPU checks look for LoopBudgetWhat).
const (
	LoopBudgetWhat = "probe calls stopped by their loop budget"
	LoopBudgetWhy  = "a loop whose bound comes from data ran past it: the probe returned 0 there, the kernel went on"
)

// SkippedAccount is the kernels-skipped clause: kernels without PTX (most
// of PyTorch, cuBLAS) counted as one group with a few names, the other
// reasons each with theirs, so a library of a thousand SASS-only kernels
// takes one line.
func SkippedAccount(skipped map[string]string) string {
	const shown = 3
	type group struct {
		names []string
		seen  map[string]bool
	}
	groups := map[string]*group{}
	for k, why := range skipped {
		base, _ := fatbin.Demangle(k)
		if base == "" {
			base = k
		}
		reason := why
		// fatbin.Kernel.Advice's words ("... has only sm_90 SASS, no PTX: ..."),
		// not any reason that says "no PTX" (a kernel no fatbin defines)
		if strings.Contains(why, " SASS, no PTX") {
			reason = "SASS only, no PTX: rebuild with -gencode arch=compute_XX,code=compute_XX to trace them"
			// why the sanitizer path did not take them (docs/sanitizer.md)
			if _, rest, ok := strings.Cut(why, "; "); ok {
				reason += "; " + rest
			}
		}
		g := groups[reason]
		if g == nil {
			g = &group{seen: map[string]bool{}}
			groups[reason] = g
		}
		if !g.seen[base] {
			g.seen[base] = true
			g.names = append(g.names, base)
		}
	}
	reasons := make([]string, 0, len(groups))
	for r := range groups {
		reasons = append(reasons, r)
	}
	sort.Strings(reasons)
	var parts []string
	for _, r := range reasons {
		g := groups[r]
		sort.Strings(g.names)
		eg := g.names[:min(shown, len(g.names))]
		more := ""
		if len(g.names) > shown {
			more = fmt.Sprintf(", +%d more", len(g.names)-shown)
		}
		parts = append(parts, fmt.Sprintf("%s (e.g. %s%s)", r, strings.Join(eg, ", "), more))
	}
	return fmt.Sprintf("%d kernels skipped: %s; list them with gpubpf kernels -p PID", len(skipped), strings.Join(parts, "; "))
}

// RecordAccount is the completeness account of the GPU's records:
// produced = delivered + dropped (+ discarded, lost, in flight when any).
func RecordAccount(st runtime.Stats) string {
	line := fmt.Sprintf("records: %d produced on the GPU = %d delivered + %d dropped (ring full)",
		st.RecordsProduced, st.Records+st.PrintkLines, st.RingDrops)
	if st.RecordsDiscard > 0 {
		line += fmt.Sprintf(" + %d discarded by the program", st.RecordsDiscard)
	}
	if st.RecordsLost > 0 {
		line += fmt.Sprintf(" + %d not read by the tool", st.RecordsLost)
	}
	if st.RingPending > 0 {
		line += fmt.Sprintf("; %d bytes reserved but never committed (a kernel did not finish)", st.RingPending)
	}
	if st.RingWaits > 0 {
		line += fmt.Sprintf("; %d warps waited for room in a full ring (--no-drop)", st.RingWaits)
		if st.RingWaitDrops > 0 {
			line += fmt.Sprintf(", %d of them dropped after waiting the whole bound (raise the bound or the ring size)", st.RingWaitDrops)
		}
	} else if st.RingDrops > 0 {
		line += "; a larger --ring-mb holds a longer burst, --no-drop loses none (the kernel waits for room)"
	}
	return line
}

// NothingTraced is the error for a traced command that ended without
// loading any CUDA kernel: every count is zero, and the user should hear
// why rather than read a summary of nothing.
func NothingTraced(t runtime.Targets, s *runtime.Session, st runtime.Stats, code int) error {
	if len(t.Command) == 0 || len(s.GPUPrograms()) == 0 || len(st.KernelsSeen) > 0 || len(st.KernelsMatched) > 0 || len(st.KernelsSkipped) > 0 {
		return nil
	}
	return &runtime.NoCUDAError{Command: t.Command[0], Code: code, PID: s.CommandRunning()}
}

// NoKernelMatched is the error of CLI.md for GPU programs whose patterns
// matched none of the kernels the traced processes loaded.
// Kernel times from CUPTI (launchlate) cover every kernel, probed or not.
func NoKernelMatched(s *runtime.Session, st runtime.Stats) error {
	if len(s.GPUPrograms()) == 0 {
		return nil
	}
	return noKernelMatched(s.Patterns(), st)
}

// noKernelMatched is NoKernelMatched for patterns.
func noKernelMatched(patterns []string, st runtime.Stats) error {
	if len(st.KernelsMatched) > 0 || len(st.KernelsSkipped) > 0 || len(st.KernelsSeen) == 0 || len(st.KernelTimesFrom) > 0 {
		return nil
	}
	seen := make([]string, 0, len(st.KernelsSeen))
	for k := range st.KernelsSeen {
		seen = append(seen, k)
	}
	sort.Strings(seen)
	matched, closest := instrument.Match(patterns, seen)
	if len(matched) > 0 {
		// matched, but the trace ended before any was instrumented or
		// skipped: -p on a process with GBs of device code to read
		return fmt.Errorf("%d of the %d kernels the process loaded matched %s, but the trace ended before any of them was "+
			"instrumented (the tool was still reading their code from the process's files): trace longer (-d), or name "+
			"fewer kernels (-k)", len(matched), len(seen), strings.Join(patterns, ", "))
	}
	var names []string
	for _, k := range closest {
		base, _ := fatbin.Demangle(k)
		names = append(names, base+" ("+k+")")
	}
	msg := fmt.Sprintf("no kernel matched %s among the %d kernels the process loaded", strings.Join(patterns, ", "), len(seen))
	if len(names) > 0 {
		msg += "; closest: " + strings.Join(names, ", ")
	}
	return fmt.Errorf("%s (list them with: gpubpf kernels -p PID)", msg)
}

// sanitizerTotals adds up the processes' sanitizer accounts.
func sanitizerTotals(st runtime.Stats) (t agentproto.SanitizeReply) {
	for _, r := range st.Sanitizer {
		t.Launches += r.Launches
		t.Threads += r.Threads
		t.Refused += r.Refused
		t.Failures += r.Failures
		if r.LastFailure != "" {
			t.LastFailure = r.LastFailure
		}
	}
	return t
}

// SanitizerJSON is the {"type":"sanitizer",...} line of the -j output when
// kernels without PTX ran the programs through the Compute Sanitizer
// (nothing otherwise): SanitizerAccount's numbers.
func SanitizerJSON(st runtime.Stats) []byte {
	if len(st.KernelsSanitized) == 0 {
		return nil
	}
	t := sanitizerTotals(st)
	b := fmt.Appendf(nil, `{"type":"sanitizer","kernels":%d,"launches":%d,"threads":%d,"launches_unpatched":%d,"failures":%d,"last_failure":`,
		len(st.KernelsSanitized), t.Launches, t.Threads, t.Refused, t.Failures)
	b = AppendJSONString(b, t.LastFailure)
	return append(b, "}\n"...)
}

// SanitizerAccount is the clause for kernels without PTX traced through the
// Compute Sanitizer (docs/sanitizer.md): how many, their launches and
// threads as the agent counted them (what the probes ran in), and launches
// that ran unpatched, with the last reason.
func SanitizerAccount(st runtime.Stats) string {
	if len(st.KernelsSanitized) == 0 {
		return ""
	}
	t := sanitizerTotals(st)
	c := fmt.Sprintf("%d kernels without PTX through the Compute Sanitizer (%d launches, %d threads patched)", len(st.KernelsSanitized), t.Launches, t.Threads)
	if t.Refused > 0 {
		c += fmt.Sprintf("; %d launches of them ran unpatched", t.Refused)
		if t.LastFailure != "" {
			c += " (" + t.LastFailure + ")"
		}
	}
	return c
}
