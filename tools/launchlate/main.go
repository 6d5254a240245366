// Package launchlate is the launchlate tool of the gpubpf binary: how long
// after the CPU called a launch API each CUDA kernel started on the GPU, per
// kernel (and stream), as bcc log2 histograms and percentiles, with the
// error bound of the clock calibration it rests on.
package launchlate

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/urfave/cli/v2"

	"github.com/gpubpf/gpubpf/pkg/runtime"
	"github.com/gpubpf/gpubpf/pkg/runtime/agentproto"
	"github.com/gpubpf/gpubpf/pkg/toolkit"
)

const examples = `
launchlate -- ./app                 # every kernel of ./app until it exits
launchlate -p 4242 -i 5             # a running process, print every 5 seconds
launchlate --stream -k gemm -- ./app  # kernels matching gemm, one histogram per stream
launchlate -j -d 10 -p 4242         # JSON lines for 10 seconds
launchlate --events -T -- ./app     # also one line per launch, with wall-clock time
launchlate --prometheus :9400 -p 4242  # serve the numbers to Prometheus while tracing
launchlate --otlp http://otel:4318 -p 4242  # push them to an OpenTelemetry collector`

// How often the GPU's start table is read and the clocks calibrated. The
// table holds LL_STARTS launches per context, and LL_GRAPH_STARTS kernel
// starts of CUDA graphs after those: at 100 ms a context can launch 650k
// kernels (and graphs can start 160k kernels) a second before one is
// overwritten unread. A read copies the whole table twice (5 MiB, torn
// slots found by comparing): every 100 ms that was most of the tool's CPU
// at 1,000 launches/s (H200, 2026-11-28: 8.3% of a core, the goal 2%), so
// a table that fills slowly is read less often, down to once per
// readQuiet (tableDue).
const (
	readEvery  = 100 * time.Millisecond
	readQuiet  = time.Second
	clockEvery = 2 * time.Second
	// accountEvery: how often --prometheus/--otlp get the account while
	// tracing
	accountEvery = 10 * time.Second
	clockRound   = 8
	startSlots   = 1 << 16 // LL_STARTS
	graphSlots   = 1 << 14 // LL_GRAPH_STARTS
)

// App is the launchlate command (run by the gpubpf binary under its name, or as
// gpubpf launchlate).
func App() *cli.App {
	app := toolkit.NewApp("launchlate", "CPU launch call to GPU kernel start latency of CUDA kernels", examples)
	app.ArgsUsage = "[-- CMD [ARGS...]]"
	app.Flags = append(append(toolkit.GPUFlags(), toolkit.PromFlags()...),
		&cli.BoolFlag{Name: "stream", Usage: "one histogram per kernel and stream"},
		&cli.BoolFlag{Name: "milliseconds", Aliases: []string{"m"}, Usage: "histograms in milliseconds, not microseconds (also --events' LAT column)"},
		&cli.BoolFlag{Name: "events", Usage: "also print one line per timed launch as it is resolved (before the summary)"},
		&cli.BoolFlag{Name: "uprobe", Usage: "stamp runtime-API launches as the application calls them, with a Linux uprobe (adds cudart's own time; costs one trap per launch)"},
		&cli.StringFlag{Name: "timing", Value: timingAuto, Usage: "kernel starts from `MODE`: auto (the GPU probe where a kernel has PTX; CUPTI's records, turned on at a process's first kernel without one, for the rest), probe (probes only: no CUPTI in the process), both (CUPTI from the start, and with --events a CUPTI line for each probed launch too: a cross-check)"},
	)
	app.Description = `The gpubpf agent in the traced process stamps each launch with the CPU clock
as the launch reaches the driver (cuLaunchKernel(Ex), cuGraphLaunch: the call
cudaLaunchKernel makes underneath) and hands the stamp to the instrumented
kernel; the first thread of the launched kernel (global thread id 0) reads
%globaltimer. The latency is the time from that call until the kernel
started: the time the launch waited in its stream's queue and for the GPU.

With --uprobe: a Linux uprobe on the runtime launch APIs (cudaLaunchKernel and
its variants, cudaGraphLaunch, in libcudart or a statically linked
executable) stamps runtime-API launches as the application calls them, in a
kernel map the GPU shares; the latency then also holds cudart's own time
before it reaches the driver (argument checks, its first-call setup). Each
launch then costs one uprobe trap (0.5-0.9 us on the machines measured, about
a fifth of a small kernel's launch), where the agent's stamp costs a clock
read.

The GPU clock is calibrated against the CPU's every 2 s (a round trip through
pinned memory); latencies are shown with that error bound, and a latency
below it as "< bound".

Kernels without PTX (PyTorch's, cuBLAS's, cuDNN's, Triton's cubins) carry no
probe: their starts come from CUPTI's kernel records, which the agent turns
on in the process at its first such kernel (a process whose kernels all have
PTX never pays for CUPTI), joined with the CPU time of each launch call from
CUPTI's callback at the driver's launch calls (GPUBPF_CUPTI_JOIN=api|external
in the program's environment takes it from CUPTI's records of the launch
calls, which name no stream, or from the agent's launch wrappers). libcupti is found in the
process: the one loaded, the CUDA wheels next to its libraries, the
toolkit's; GPUBPF_CUPTI=PATH in the program's environment names one,
GPUBPF_CUPTI=off keeps CUPTI out. CUPTI converts its GPU times to the CPU
clock itself (they are shown without a bound of ours; --timing both compares
them with the probes). Where CUPTI is on, its records give every kernel's run
time: the RUN columns (--timing both turns it on for a program whose kernels
all have PTX). When CUPTI cannot be had (none found, or held by a profiler in
the process), one line says why and the kernels without PTX are listed as
skipped. While launchlate holds CUPTI a profiler started in the process
cannot have it; it is let go at the end.

Kernels of CUDA graphs are timed from the cudaGraphLaunch/cuGraphLaunch call
of the replay that ran them, and shown as "KERNEL (in a CUDA graph)": the
agent gives each graph a stamp word in device memory and writes the launch's
stamp there on the launch's stream just before the graph (one stream write
per graph launch: at 300k replays/s of a tiny graph it halves the replay
rate; docs/graphs.md). Their stream is not known (--stream shows them per
process). A graph instantiated before launchlate came has its kernel nodes
swapped for the probes at its next launch when the agent saw it
instantiated (the agent preloaded); one made before an injected agent came
is timed through CUPTI, turned on at its first launch. The account line
says how many graph launches ran and why any were not instrumented. Replays
it could not stamp (a graph launched inside another graph or into a
capture) are counted, not timed.

With --events: also one line per timed launch, under a header: TIME(s) of
the launch call since tracing began (with -T, its wall-clock time first),
PID, DEV (device), LAT(us) (LAT(ms) with -m; "<B" when below the error
bound B), STREAM ("graph" for graph kernels), KERNEL. A launch is printed
once a clock calibration after it places it, so lines come in batches
(about every 2 s), each in launch-call order. Starts without a CPU stamp
are counted, not printed.

With -j: with --events, one {"type":"launch",...} object per timed launch
(fields: pid, device, kernel, mangled, stream, graph, grid (%gridid, low 48
bits: unique per launch in its context, kept by a graph's kernel from one
replay to the next), cpu_ns (the launch call, CLOCK_MONOTONIC), gpu_ns (the
kernel's first thread, converted to CLOCK_MONOTONIC: cpu_ns + latency_ns),
latency_ns (signed, not clamped at zero), bound_ns); one
{"type":"kernel",...} object per kernel (and stream) and interval (fields:
time, kernel, mangled, pid, stream ("graph" for graph kernels), graph,
launches, p50_ns, p90_ns, p99_ns, p999_ns, max_ns, below_bound, bound_ns,
untimed, cupti, and with CUPTI's run times dur_launches, dur_p50_ns ...
dur_p999_ns, dur_max_ns; hist_us: [[low, high, count], ...]), then
{"type":"summary",...}.`
	app.Action = run
	return app
}

func run(c *cli.Context) error {
	if err := toolkit.RequireRoot(); err != nil {
		return err
	}
	targets, err := toolkit.TargetsOf(c, c.Args().Slice())
	if err != nil {
		return err
	}
	spec, err := loadLaunchlate()
	if err != nil {
		return fmt.Errorf("loading the embedded BPF object: %w", err)
	}
	// processes that exited: their metric series go (--prometheus) once
	// their last numbers were taken
	gone := make(chan int, 64)
	timing := c.String("timing")
	if timing != timingAuto && timing != timingProbe && timing != timingBoth {
		return toolkit.Usagef("--timing %q: want auto, probe or both", timing)
	}
	uprobes := c.Bool("uprobe")
	if !uprobes {
		if err := dropUprobes(spec); err != nil {
			return fmt.Errorf("the embedded BPF object: %w", err)
		}
	}
	// CUPTI's records come on in a process at its first kernel without a
	// probe: its launch callback would cost a program whose kernels all
	// have PTX a third of its launch rate for nothing.
	kt := runtime.KernelTimesWhenNeeded
	switch timing {
	case timingProbe:
		kt = runtime.KernelTimesOff
	case timingBoth:
		kt = runtime.KernelTimesAlways
	}
	sess, err := runtime.Open(spec, runtime.Options{Kernels: toolkit.KernelPatterns(c), Client: "launchlate", Log: toolkit.LogOf(c), Warn: toolkit.WarnOf("launchlate"), NoInject: c.Bool(toolkit.FlagNoInject),
		LaunchWords: "launch_stamps", OptionalUprobes: uprobes, Clocks: true, KernelTimes: kt, Devices: toolkit.DevicesOf(c),
		ProcessGone: func(pid int) {
			select {
			case gone <- pid:
			default: // the trace is ending: nothing forgets any more
			}
		}})
	if err != nil {
		return err
	}
	defer sess.Close()
	jsonOut := c.Bool(toolkit.FlagJSON)
	if !jsonOut {
		what := toolkit.KernelsWhat(c)
		if timing != timingProbe && len(c.StringSlice(toolkit.FlagKernel)) == 0 {
			what = "every kernel"
		}
		toolkit.StartLine(os.Stderr, fmt.Sprintf("Tracing CUDA launch -> GPU start latency of %s %s", what, targets.Describe()))
	}
	ctx, stop := toolkit.TraceContext(c)
	defer stop()
	l := &launchlate{
		sess: sess, nameOf: sess.KernelName, indexOf: sess.KernelIndex, instrumented: sess.Instrumented, traces: sess.Traces, tr: newTracker(), w: os.Stdout, json: jsonOut, stamp: c.Bool(toolkit.FlagTimestamp),
		byStream: c.Bool("stream"), ms: c.Bool("milliseconds"), interval: c.Float64(toolkit.FlagInterval) > 0,
		cur: map[key]*stats{}, events: c.Bool("events"), uprobes: uprobes, timing: timing, cupti: timing != timingProbe,
		patterns: c.StringSlice(toolkit.FlagKernel),
	}
	l.tr.stampOf = graphStamps(sess)
	if l.events {
		l.ev = eventFormat{json: jsonOut, stamp: l.stamp, ms: l.ms, t0: agentproto.MonoNow(), wall: time.Now().UnixNano() - int64(agentproto.MonoNow()), dur: l.cupti}
		if !jsonOut {
			fmt.Fprint(l.w, l.ev.header())
		}
	}
	exp, err := toolkit.StartExporter(c, "launchlate")
	if err != nil {
		return err
	}
	if exp != nil {
		defer func() {
			if err := exp.Close(); err != nil {
				fmt.Fprintf(os.Stderr, "launchlate: %v\n", err)
			}
		}()
		l.prom = newMetrics(exp)
	}
	pollCtx, stopPoll := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		l.poll(pollCtx, time.Duration(c.Float64(toolkit.FlagInterval)*float64(time.Second)))
	}()
	go func() {
		defer wg.Done()
		l.forgetGone(pollCtx, gone)
	}()
	code, traceErr := sess.Trace(ctx, targets)
	stop()
	stopPoll()
	wg.Wait()
	l.mu.Lock()
	l.read(true)
	l.calibrate(true) // the processes still attached; those gone took one at exit
	l.tr.resolve(true, 0, l.timed, l.untimed)
	l.kernelTimes(true)
	l.flushEvents()
	l.mu.Unlock()
	closeErr := sess.Close()
	st := sess.Stats()
	if traceErr != nil && st.Processes == 0 {
		return traceErr
	}
	l.report(true)
	a := &toolkit.Account{Tool: "launchlate"}
	l.account(a)
	toolkit.KernelAccount(a, l.ktAccount(a, st))
	if l.prom != nil {
		a.Export(l.prom.e)
	}
	if !jsonOut {
		fmt.Fprintln(os.Stderr, a.String())
		for _, f := range st.ProbeFailures {
			fmt.Fprintln(os.Stderr, "launchlate: "+f)
		}
	} else {
		l.w.Write(toolkit.GraphsJSON(st))
		l.summaryJSON(st)
	}
	return toolkit.Finish("launchlate", targets, sess, st, code, traceErr, closeErr)
}

// launchlate holds the trace's state between readings.
type launchlate struct {
	mu     sync.Mutex
	sess   *runtime.Session
	nameOf func(uint32) string // the session's mangled kernel names (a test's own)
	// the session's kernel numbers and probes (a test's own)
	indexOf                       func(string) uint32
	traces                        func(int) bool // --device
	instrumented                  func(string) bool
	tr                            *tracker
	w                             io.Writer
	json                          bool
	stamp                         bool
	byStream                      bool
	ms                            bool
	interval                      bool
	events                        bool   // --events
	uprobes                       bool   // --uprobe: runtime-API launches stamped by uprobes
	timing                        string // --timing
	cupti                         bool   // CUPTI's kernel records wanted (runtime.Options.KernelTimes)
	probedK                       map[uint32]bool
	prom                          *metrics        // --prometheus (nil: off)
	patterns                      []string        // -k, for CUPTI's records (nil: every kernel)
	want                          map[string]bool // patterns matched, by kernel
	ktRecords, ktTimed, ktUntimed uint64          // CUPTI's records: all, timed from them, without a stamp
	ev                            eventFormat     // how --events lines are written
	batch                         []launchEvent
	evBuf                         []byte
	names                         map[uint32]kernelNames // --events' names by kernel index

	cur       map[key]*stats // since the last report (-i) or the start
	lastClock time.Time
	// when the start table is read next at the latest, and the GPU's
	// count of starts recorded now and as of the last read (tableDue)
	nextRead                 time.Time
	recorded, recordedAtRead uint64
	// recordedNow reads the count (startsRecorded; a test's own)
	recordedNow func() (uint64, error)
	clockErr    string // the last calibration failure, for the account
	clocks      int
	maxBound    uint64
	timedN      uint64
	untimedN    uint64
	graphN      uint64 // graph kernel starts without a stamp
	graphT      uint64 // graph kernel starts timed (in timedN too)
	produced    uint64 // starts the GPU recorded (nstarts)
	calls       [8]uint64
	graphSeen   map[source][]uint64 // graph_starts as last read
}

// graphStarts counts the untimed starts of graph kernels since the last
// reading.
func (l *launchlate) graphStarts(src source, vals []byte) {
	if l.graphSeen == nil {
		l.graphSeen = map[source][]uint64{}
	}
	prev := l.graphSeen[src]
	if len(prev) != len(vals)/8 {
		prev = make([]uint64, len(vals)/8)
		l.graphSeen[src] = prev
	}
	for k := range prev {
		v := binary.LittleEndian.Uint64(vals[k*8:])
		if v <= prev[k] {
			continue
		}
		n := v - prev[k]
		prev[k] = v
		key := key{kernel: uint32(k), graph: true}
		if l.byStream {
			key.pid = src.pid
		}
		l.get(key).untimed += n
		l.graphN += n
	}
}

// poll reads the start table, calibrates and reports (with -i) until ctx
// ends.
func (l *launchlate) poll(ctx context.Context, interval time.Duration) {
	tk := time.NewTicker(readEvery)
	defer tk.Stop()
	var next time.Time
	if interval > 0 {
		next = time.Now().Add(interval)
	}
	lastAccount := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tk.C:
			report := interval > 0 && !now.Before(next)
			l.mu.Lock()
			if l.tableDue(now, report) {
				l.read(report)
				l.recordedAtRead, l.nextRead = l.recorded, now.Add(readQuiet)
			}
			if now.Sub(l.lastClock) >= clockEvery {
				l.calibrate(false)
			} else {
				l.takeClocks()
			}
			l.tr.resolve(false, agentproto.MonoNow(), l.timed, l.untimed)
			l.kernelTimes(false)
			l.flushEvents()
			if l.prom != nil && now.Sub(lastAccount) >= accountEvery {
				// the account as the trace goes, for a fleet's dashboards
				lastAccount = now
				a := &toolkit.Account{Tool: "launchlate"}
				l.account(a)
				toolkit.KernelAccount(a, l.ktAccount(a, l.sess.Stats()))
				a.Export(l.prom.e)
			}
			l.mu.Unlock()
			if report {
				l.report(false)
				next = next.Add(interval)
			}
		}
	}
}

// tableDue says whether the start table is read in this tick: with
// --events or a report, or readQuiet after the last read, or when the
// GPU has recorded an eighth of the graph part's slots (the smaller part)
// since then, counted by nstarts, which is one word to read: a burst after
// a quiet second is read within readEvery, before its starts come near a
// turn of the table.
func (l *launchlate) tableDue(now time.Time, report bool) bool {
	if report || l.events {
		return true
	}
	if l.recordedNow == nil {
		l.recordedNow = l.startsRecorded
	}
	n, err := l.recordedNow()
	if err != nil {
		return true
	}
	l.recorded = n
	l.recordedAtRead = min(l.recordedAtRead, n) // a process gone
	return !now.Before(l.nextRead) || n-l.recordedAtRead >= graphSlots/8
}

// startsRecorded is the GPU's count of kernel starts it recorded, in every
// context traced.
func (l *launchlate) startsRecorded() (uint64, error) {
	copies, err := l.sess.ReadMapsLive("nstarts")
	if err != nil {
		return 0, err
	}
	var n uint64
	for _, mc := range copies {
		n += startsIn(mc)
	}
	return n, nil
}

// startsIn is one context's copy of nstarts: its count.
func startsIn(mc runtime.MapCopy) uint64 {
	if v := mc.Values(); len(v) >= 8 {
		return binary.LittleEndian.Uint64(v)
	}
	return 0
}

// calibrate measures the clocks of every process still traced (the
// runtime also does as a context is first instrumented and as a process
// exits) and takes the new samples.
func (l *launchlate) calibrate(final bool) {
	l.lastClock = time.Now()
	if _, err := l.sess.Calibrate(clockRound); err != nil && !final {
		l.clockErr = err.Error()
	}
	l.takeClocks()
}

func (l *launchlate) takeClocks() {
	cs, n := l.sess.ClockSamplesSince(l.clocks)
	for _, c := range cs {
		l.tr.addClock(source{c.PID, c.Device, c.Ctx}, c)
		if l.prom != nil {
			l.prom.setBound(c.PID, c.Device, c.Bound)
		}
	}
	l.clocks = n
}

// read takes the new kernel starts from the GPU's start table, copied as
// it is now (live: the copy waits for none of the application's launches);
// with all, also the counters, read after the launches issued so far: only
// for a report and at the end.
func (l *launchlate) read(all bool) {
	copies, err := l.sess.ReadMapsLive("starts")
	again, err2 := l.sess.ReadMapsLive("starts")
	if err = errors.Join(err, err2); err != nil {
		fmt.Fprintf(os.Stderr, "launchlate: %v\n", err)
	}
	second := map[source][]byte{}
	for _, mc := range again {
		second[source{mc.PID, mc.Device, mc.Ctx}] = mc.Values()
	}
	for _, mc := range copies {
		src := source{mc.PID, mc.Device, mc.Ctx}
		if b, ok := second[src]; ok {
			l.tr.ingest(src, mc.Values(), b)
		}
	}
	// the stamps of the graph launches that ran the swapped nodes just
	// read (their starts carry a run index, tracker.stampOf)
	if err := l.sess.ReadGraphStamps(); err != nil {
		fmt.Fprintf(os.Stderr, "launchlate: %v\n", err)
	}
	if !all {
		return
	}
	maps := []string{"nstarts", "graph_starts"}
	if l.uprobes {
		maps = append(maps, "calls") // only the uprobes count calls
	}
	copies, err = l.sess.ReadMaps(maps...)
	if err != nil {
		fmt.Fprintf(os.Stderr, "launchlate: %v\n", err)
	}
	var produced uint64
	for _, mc := range copies {
		switch {
		case mc.Name == "graph_starts":
			l.graphStarts(source{mc.PID, mc.Device, mc.Ctx}, mc.Values())
		case mc.Name == "nstarts":
			produced += startsIn(mc)
		case mc.Name == "calls" && mc.Kernel != nil:
			for i := range l.calls {
				var per []uint64
				if mc.Kernel.Lookup(uint32(i), &per) == nil {
					var v uint64
					for _, n := range per {
						v += n
					}
					l.calls[i] = v
				}
			}
		}
	}
	// A process that has gone is read no more: keep its last count.
	l.produced = max(l.produced, produced)
}

func (l *launchlate) keyOf(src source, s start) key {
	k := key{kernel: s.kernel, graph: s.isGraph()}
	if l.byStream {
		k.pid, k.stream = src.pid, s.stream
		if k.graph {
			k.stream = 0 // not known; graphStarts' key
		}
	}
	return k
}

func (l *launchlate) get(k key) *stats {
	s := l.cur[k]
	if s == nil {
		s = newStats()
		l.cur[k] = s
	}
	return s
}

func (l *launchlate) timed(src source, lat latency) {
	l.get(l.keyOf(src, lat.s)).add(lat)
	if l.prom != nil {
		l.prom.observeLatency(src.pid, l.metricName(lat.s.kernel, lat.s.isGraph()), lat.cupti, lat.ns)
	}
	if l.events {
		l.batch = append(l.batch, launchEvent{src, lat})
	}
	l.timedN++
	if lat.s.isGraph() {
		l.graphT++
	}
	l.maxBound = max(l.maxBound, lat.bound)
}

func (l *launchlate) untimed(src source, s start) {
	l.get(l.keyOf(src, s)).untimed++
	l.untimedN++
	if l.prom != nil {
		l.prom.addUntimed(src.pid, l.metricName(s.kernel, s.isGraph()))
	}
}

func (l *launchlate) account(a *toolkit.Account) {
	timed := ""
	if l.graphT > 0 {
		timed = fmt.Sprintf("%d of them in CUDA graphs, from their graph launch", l.graphT)
	}
	a.Add(l.timedN, "kernel starts timed", timed)
	if l.graphN > 0 {
		a.Add(l.graphN, "starts of CUDA graph kernels not timed", "counted: a node made before the trace began, or a replay with no stamp (a graph inside another, or launched into a capture)")
	}
	if n := l.untimedN - l.tr.stale - l.tr.noStamp; n > 0 {
		a.Add(n, "starts without a CPU stamp", "launched by a path no stamp reached (--uprobe: a runtime call stamped more than 1 ms before the driver got it)")
	}
	if l.tr.noStamp > 0 {
		a.Add(l.tr.noStamp, "starts of CUDA graph kernels without their graph launch's stamp",
			"the agent let the stamp go before the tool read it, or the graph changed in place after the run's launch")
	}
	if l.tr.stale > 0 {
		a.Add(l.tr.stale, "starts not timed: no clock calibration of their context came after them", fmt.Sprintf("within %v; counted, not held", staleAfter))
	}
	if lost := int64(l.produced) - int64(l.tr.read); lost > 0 {
		a.Add(uint64(lost), "starts lost", "overwritten on the GPU before the tool read them")
	}
	if l.tr.torn > 0 {
		a.Add(l.tr.torn, "readings of a start held back", "the GPU was writing it as it was read; taken at the next reading")
	}
	if l.uprobes {
		a.Note(fmt.Sprintf("CPU times from uprobes on the runtime API: %d kernel launch calls, %d graph launch calls", l.calls[kindRuntime], l.calls[kindGraphRT]))
	} else {
		a.Note("CPU times taken by the gpubpf agent as each launch reached the driver (--uprobe: as the runtime API was called)")
	}
	if l.clocks > 0 {
		a.Note(fmt.Sprintf("clock error bound %s (%d calibrations)%s", toolkit.FormatNs(l.maxBound), l.clocks, l.tr.boundsByDevice()))
	}
	if l.clockErr != "" {
		a.Note("last clock calibration failed: " + l.clockErr)
	}
}

// graphStamps is the tracker's join of swapped graph nodes' runs with their
// graph launches' stamps (runtime.Session.ReadGraphStamps), one lookup per
// process.
func graphStamps(sess *runtime.Session) func(source, uint32, uint64) (uint64, bool) {
	byPID := map[int]func(uint32, uint64) (uint64, bool){}
	return func(src source, id uint32, idx uint64) (uint64, bool) {
		f, ok := byPID[src.pid]
		if !ok {
			f = sess.GraphLaunchStamps(src.pid)
			byPID[src.pid] = f
		}
		if f == nil {
			return 0, false
		}
		return f(id, idx)
	}
}

// dropUprobes leaves the CPU programs out of spec: without --uprobe the
// agent stamps every launch itself, and a trap per launch would cost more
// than the launch's other bookkeeping together.
func dropUprobes(spec *ebpf.CollectionSpec) error {
	_, cpu, err := runtime.SplitPrograms(spec)
	if err != nil {
		return err
	}
	for _, c := range cpu {
		delete(spec.Programs, c.Spec.Name)
	}
	return nil
}
