// Package gpuevent_snoop is the gpuevent_snoop tool of the gpubpf binary: it
// streams the CUDA API calls of processes: device allocations and frees,
// copies, memsets, kernel and graph launches, with sizes, directions,
// durations, failures (by CUDA error name), kernel names and call sites, and
// reports the allocations never freed. It uses real kernel uprobes on
// libcudart, libcuda or the executable (static cudart); it needs no GPU
// agent, and takes kernel launches from one where a -p process has it
// (agentfeed.go) and, once it is up, from the one it preloads into a command
// it starts (agentswitch.go).
package gpuevent_snoop

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cilium/ebpf/rlimit"
	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/gpubpf/gpubpf/pkg/procmaps"
	"github.com/gpubpf/gpubpf/pkg/promexport"
	"github.com/gpubpf/gpubpf/pkg/runtime/agentproto"
	"github.com/gpubpf/gpubpf/pkg/runtime/launch"
	"github.com/gpubpf/gpubpf/pkg/toolkit"
)

const usageText = "CUDA API event stream: allocations, frees, copies, launches, leaks"

const description = `Traces cudaMalloc/cudaFree/cudaMemcpy/cudaMemset/cudaLaunchKernel/cudaGraphLaunch (and
their Async, Managed and per-thread-stream variants) in libcudart.so* or in an executable
with static cudart, and cuMemAlloc_v2/cuMemFree_v2/cuMemcpy*/cuLaunchKernel(Ex) in
libcuda.so* (and cuMemCreate/cuMemRelease, where "ptr" is the allocation handle), with
kernel uprobes. A runtime call that goes on to the driver is reported once.
Ends with a leak report (device allocations never freed, by call site) and a one-line account.

Cost: about one probe hit per launch. A launch is reported from its entry; its return (result
and duration) is taken for the first launch of each configuration (kernel, grid, block, shared
memory, stream), for every launch within a second of a failed call, and for one launch in 64
(Linux 6.13+ uprobe sessions; older kernels take every return). The driver's launch functions,
which cudart calls for each runtime launch, are probed only in processes that call them
themselves (an object imports or names cuLaunchKernel*, or a kernel is looked up outside
cudart); --driver-launches probes them everywhere. The account line says which mechanism
observed each layer, how many launch results were checked and the probe hits per launch.
Kernel launches from the gpubpf agent, each with its result and duration and no probe hit at all:
with -p, from a process that has the agent loaded (started with LD_PRELOAD, or by another gpubpf
tool). -- CMD is started with the agent preloaded (the library next to the tool, in
/usr/local/lib/gpubpf or /usr/lib/gpubpf, or the copy embedded in the tool): its launches are
probed until the agent is up and the program has loaded the CUDA driver (a few milliseconds in),
then come from the agent. The account says from when, or why the agent never took over (it did not
load: LD_PRELOAD cleared on the way; the program never loaded the driver). Not with -a or -s
(kernel arguments and stacks come from the probes), --driver-launches or --no-agent (uprobes
only), nor for static or setuid/setgid programs or ones that define the driver's launch functions
themselves (-v says why).

Targets: -p PID (may repeat), or -- CMD (started and probed before its first instruction, traced
until it exits), or neither: ALL processes that map a libcudart/libcuda found in the linker
cache, LD_LIBRARY_PATH or /usr/local/cuda*, now or later; libraries loaded from elsewhere
(e.g. pip wheels) and executables with static cudart are found by a rescan of /proc every
second, so their first calls can be missed. Child processes of a -p/CMD target are not traced.

Stream columns: TIME(s) since start, PID, COMM, CALL, RET (OK, FAIL with the CUDA error
name, or - for a launch whose result was not checked), then per call: malloc size/ptr/caller;
free ptr/size; memcpy direction (H2D D2H D2D H2H default), bytes, sync|async, GB/s
(synchronous copies only); launch kernel, grid, block, shared memory, stream; duration of the
call. -a copies the 8 bytes at each of the first N kernel arguments (a 4-byte argument shows
4 bytes of what follows). Driver-level launches name the CUfunction handle (it has no host
symbol) unless a lookup named it.

JSON (-j), one object per line, field "type":
  malloc|free|memcpy|memset|launch|graph: time_ns (Unix ns), pid, tid, comm, api,
    layer (runtime|driver), ret, error ("" on success), dur_ns (ret, error and dur_ns
    are null for a launch whose result was not checked), and
    malloc: size, ptr, caller; free: ptr, size (null if allocated before tracing);
    memcpy: kind, bytes, dst, src, sync, gbps; memset: ptr, value, bytes;
    launch: kernel, kernel_mangled, func, grid [x,y,z], block [x,y,z], shmem, args (-a);
    graph: graph_exec; stream where the call takes one; stack (-s).
  summary: pid, comm, api, calls, errors, bytes, time_ns, timed_calls (time_ns is the time
    of the timed_calls; launches not checked are not timed)   (--summary or -i)
  kernel: pid, kernel, launches, errors                     (--summary or -i)
  leak: pid, comm, site, api, allocs, bytes, ptrs
  account: events, shown, dropped_ringbuf, lost_inflight, nested_folded,
    cudart_internal, returns_without_entry, processes, objects, runtime_layer,
    driver_layer (mechanism and objects), driver_launch_probes (in which processes),
    launches, launches_from_agent, launches_lost_agent, launches_checked, probe_hits,
    launch_probe_hits, probe_hits_per_launch,
    single_stepped (launch functions whose probed instruction the kernel single-steps);
    with -- CMD and the agent: agent (when it took over, or why not), agent_from_ms (ms
    after the start; null if never), launches_before_agent (from probes),
    launch_probe_hits_after_agent
Driver calls that cudart makes outside a traced runtime call (context and stream set-up)
are left out and counted in the account (cudart_internal).`

const examples = `gpuevent_snoop -- ./alloc_mix          # trace a program from its first call
gpuevent_snoop -p 4242                  # trace a running process
gpuevent_snoop                          # every CUDA process, including later ones
gpuevent_snoop -e malloc,free -- ./app  # allocations and the leak report only
gpuevent_snoop --min-size 1M -p 4242    # calls moving 1 MiB or more
gpuevent_snoop -e launch -k 'vec*' -a 4 -- ./vec_add   # launches of matching kernels, 4 args
gpuevent_snoop --summary -i 5 -p 4242   # per-API tables every 5 s
gpuevent_snoop -j -d 10 > calls.jsonl   # JSON lines for 10 s`

// App is the gpuevent_snoop command (run by the gpubpf binary under its
// name, or as gpubpf gpuevent_snoop).
func App() *cli.App {
	app := toolkit.NewApp("gpuevent_snoop", usageText, examples)
	app.UsageText = "gpuevent_snoop [flags] [-p PID | -- CMD [ARGS...]]"
	app.Description = description
	app.Flags = append(append(toolkit.CommonFlags(), toolkit.PromFlags()...),
		&cli.StringFlag{Name: "kinds", Aliases: []string{"e"}, Value: "all", Usage: "call kinds: `LIST` of malloc,free,memcpy,memset,launch,graph"},
		// --events is a switch in the other tools ("print every event")
		toolkit.Renamed(&cli.StringFlag{Name: "events"}, "kinds"),
		&cli.StringFlag{Name: "min-size", Usage: "only sized calls of at least `BYTES` (suffix K, M, G: powers of 1024)"},
		&cli.IntFlag{Name: "args", Aliases: []string{"a"}, Usage: "copy the first `N` kernel argument words (max 8)"},
		&cli.BoolFlag{Name: "stack", Aliases: []string{"s"}, Usage: "capture and symbolise the user stack of each call"},
		&cli.BoolFlag{Name: "summary", Usage: "per-process tables (calls, bytes, time per API; top kernels) instead of the stream"},
		&cli.BoolFlag{Name: "no-driver", Usage: "do not probe libcuda: misses programs that call the driver API directly (Triton, CuPy RawKernel)"},
		&cli.BoolFlag{Name: "launch-entry", Usage: "never take a launch's return: no return code or duration for any launch (RET shows -); by default the first launch of each kernel configuration, launches after a failure and one in 64 are checked"},
		&cli.BoolFlag{Name: "no-agent", Usage: "probe launches with uprobes only: not from the gpubpf agent of a -p process, and -- CMD starts without it (by default the agent reports them: no trap per launch)"},
		&cli.BoolFlag{Name: "driver-launches", Usage: "probe the driver's launch functions in every traced process, not only in those that call them outside cudart (costs a probe hit per runtime launch)"},
		&cli.UintFlag{Name: toolkit.FlagRingMB, Value: 16, Usage: "ring buffer size in `MiB`, a power of two of at most 1024",
			Action: func(_ *cli.Context, mb uint) error {
				if mb == 0 || mb&(mb-1) != 0 || mb > 1024 {
					return toolkit.Usagef("--%s %d: want a power of two of at most 1024", toolkit.FlagRingMB, mb)
				}
				return nil
			}},
		toolkit.Renamed(&cli.IntFlag{Name: "buffer-mb", Aliases: []string{"b"}}, toolkit.FlagRingMB),
	)
	app.Action = run
	return app
}

func parseSize(s string) (uint64, error) {
	if s == "" {
		return 0, nil
	}
	mult := uint64(1)
	switch strings.ToUpper(s[len(s)-1:]) {
	case "K":
		mult = 1 << 10
	case "M":
		mult = 1 << 20
	case "G":
		mult = 1 << 30
	}
	if mult > 1 {
		s = s[:len(s)-1]
	}
	v, err := strconv.ParseUint(strings.TrimSuffix(strings.ToUpper(s), "I"), 10, 64)
	if err != nil {
		return 0, toolkit.Usagef("--min-size %q is not a byte count (examples: 4096, 64K, 1M)", s)
	}
	return v * mult, nil
}

func run(c *cli.Context) error {
	pids := c.IntSlice(toolkit.FlagPID)
	argv := c.Args().Slice()
	if len(pids) > 0 && len(argv) > 0 {
		return toolkit.Usagef("give either -p PID or -- CMD, not both")
	}
	list := c.String("kinds")
	if c.IsSet("events") {
		list = c.String("events")
	}
	kinds, err := kindList(list)
	if err != nil {
		return err
	}
	minSize, err := parseSize(c.String("min-size"))
	if err != nil {
		return err
	}
	nargs := c.Int("args")
	if nargs < 0 || nargs > maxArgs {
		return toolkit.Usagef("-a %d: give 0 to %d kernel argument words", nargs, maxArgs)
	}
	bufMB := int(c.Uint(toolkit.FlagRingMB))
	if c.IsSet("buffer-mb") { // the old name: any size, rounded up
		if bufMB = c.Int("buffer-mb"); bufMB < 1 || bufMB > 1024 {
			return toolkit.Usagef("--buffer-mb %d: give a ring buffer size of 1 to 1024 MiB", bufMB)
		}
	}
	opt := Options{
		JSON: c.Bool(toolkit.FlagJSON), Timestamp: c.Bool(toolkit.FlagTimestamp),
		Summary: c.Bool("summary"), Args: nargs, Stack: c.Bool("stack"),
		MinSize: minSize, Kernels: c.StringSlice(toolkit.FlagKernel),
	}
	verbose := c.Bool(toolkit.FlagVerbose)
	logf := func(format string, a ...any) {
		if verbose {
			fmt.Fprintf(os.Stderr, "gpuevent_snoop: "+format+"\n", a...)
		}
	}
	if err := toolkit.RequireRoot(); err != nil {
		return err
	}
	exp, err := toolkit.StartExporter(c, "gpuevent_snoop")
	if err != nil {
		return err
	}
	if exp != nil {
		defer func() {
			if err := exp.Close(); err != nil {
				fmt.Fprintf(os.Stderr, "gpuevent_snoop: %v\n", err)
			}
		}()
	}
	for _, pid := range pids {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
			return fmt.Errorf("process %d does not exist: check the PID (ps -e | grep NAME)", pid)
		}
	}
	return trace(c.App.Writer, c.App.ErrWriter, traceConfig{
		noDriver:       c.Bool("no-driver"),
		launchEntry:    c.Bool("launch-entry"),
		driverLaunches: c.Bool("driver-launches"),
		noAgent:        c.Bool("no-agent"),
		pids:           pids, argv: argv, kinds: kinds, opt: opt, bufMB: bufMB,
		interval: time.Duration(c.Float64(toolkit.FlagInterval) * float64(time.Second)),
		duration: time.Duration(c.Float64(toolkit.FlagDuration) * float64(time.Second)),
		logf:     logf,
		exp:      exp,
	})
}

type traceConfig struct {
	noDriver       bool
	launchEntry    bool
	driverLaunches bool
	noAgent        bool
	pids           []int
	argv           []string
	kinds          uint32
	opt            Options
	bufMB          int
	interval       time.Duration
	duration       time.Duration
	logf           func(string, ...any)
	exp            *promexport.Exporter // --prometheus, --otlp (nil: off)
}

func roundPow2(n int) uint32 {
	v := uint32(1)
	for int(v) < n {
		v <<= 1
	}
	return v
}

func trace(stdout, stderr io.Writer, cfg traceConfig) error {
	if stdout == nil {
		stdout = os.Stdout
	}
	if stderr == nil {
		stderr = os.Stderr
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return fmt.Errorf("cannot lift the locked-memory limit for BPF maps: %w", err)
	}
	load := loadGpueventsnoop
	if _, err := btf.LoadKernelSpec(); err != nil || os.Getenv("GPUEVENT_SNOOP_NO_BTF") != "" {
		// No kernel BTF (CONFIG_DEBUG_INFO_BTF off; GPUEVENT_SNOOP_NO_BTF
		// for tests): the object without
		// sessions and without the CO-RE read; names of an exited
		// shared-cudart program's kernels then need /proc while it runs.
		load = loadGpueventsnoopnobtf
	}
	spec, err := load()
	if err != nil {
		return fmt.Errorf("the embedded BPF object is invalid (rebuild with make generate): %w", err)
	}
	spec.Maps["events"].MaxEntries = roundPow2(cfg.bufMB) << 20
	filter := len(cfg.pids) > 0 || len(cfg.argv) > 0
	set := func(name string, v any) error { // v: the variable's own type (uint32, uint64)
		return toolkit.SetVariables(spec, map[string]any{name: v})
	}
	if err := set("filter_pids", b2u(filter)); err != nil {
		return err
	}
	if err := set("want_nargs", uint32(cfg.opt.Args)); err != nil {
		return err
	}
	if err := set("want_stack", b2u(cfg.opt.Stack)); err != nil {
		return err
	}
	// The launch-rate benchmark's cost breakdown (scripts/gpu): 1 = probes
	// that return at once, 2 = everything but the ring buffer.
	if v := os.Getenv("GPUEVENT_SNOOP_COST"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 2 {
			return fmt.Errorf("GPUEVENT_SNOOP_COST=%q: want 0, 1 or 2", v)
		}
		if err := set("cost_mode", uint32(n)); err != nil {
			return err
		}
	}
	// Wake the reader per 1/16 of the ring (at most 256 KiB); it polls
	// every readerPoll for what is below that.
	if err := set("wakeup_bytes", min(uint64(spec.Maps["events"].MaxEntries)/16, 256<<10)); err != nil {
		return err
	}
	tracingAll := len(cfg.pids) == 0 && len(cfg.argv) == 0
	if err := set("launch_entry_only", b2u(cfg.launchEntry)); err != nil {
		return err
	}
	if err := set("sample_mask", uint64(launchSampleMask)); err != nil {
		return err
	}
	// Tracing all, a process is not known before its first call: the
	// driver's launch functions are probed everywhere.
	allDriver := cfg.driverLaunches || tracingAll
	if err := set("all_driver_launches", b2u(allDriver)); err != nil {
		return err
	}
	objs, mode, err := loadObjects(spec)
	if err != nil {
		return err
	}
	defer objs.Close()
	// Per-process links need uprobe_multi's process filter, which before
	// Linux 6.10 ("bpf: fix multi-uprobe PID filtering logic", also in
	// 6.9.5 and 6.6.35, not told apart here) matched one thread, not the
	// process; tracing all links to the files alone.
	perPID := mode == modeSession || (mode == modeMulti && kernelAtLeast(6, 10))
	if !perPID {
		allDriver = true
	}

	att := NewAttacher(cfg.kinds)
	att.enter, att.exit, att.session, att.mode = objs.Enter, objs.Exit, objs.Session, mode
	att.noDriver = cfg.noDriver
	att.launchEntry = cfg.launchEntry
	att.allDriverLaunches = allDriver
	att.markPID = func(pid int, flags uint8) error {
		if err := objs.Pids.Put(uint32(pid), flags); err != nil {
			return fmt.Errorf("adding process %d to the BPF filter: %w", pid, err)
		}
		return nil
	}
	defer att.Close()
	res := NewResolver()
	res.objects = att.Object
	addPID := func(pid int) error {
		if allDriver {
			// Known only after loading (links that name no process):
			// runtime launches record their frame for the driver launch
			// probes every process has.
			return att.markPID(pid, gesPIDTraced|gesPIDDriverLaunch)
		}
		return att.markPID(pid, gesPIDTraced)
	}

	// Targets.
	var cmd *launch.Command
	// Processes with the gpubpf agent report their launches through it
	// (agentfeed.go): only with per-process links, which can leave the
	// launch functions unprobed in that process alone.
	var feeds []*agentFeed
	defer func() {
		for _, f := range feeds {
			f.close()
		}
	}()
	// A command started with the agent preloaded switches its launches
	// over to it once the agent is up (agentswitch.go). ringEmptied is
	// when the reader last found the BPF ring empty.
	var sw *launchSwitch
	var ringEmptied atomic.Uint64
	var target string
	switch {
	case len(cfg.pids) > 0:
		for _, pid := range cfg.pids {
			if err := addPID(pid); err != nil {
				return err
			}
			if perPID && !cfg.noAgent && !cfg.driverLaunches && cfg.kinds&(1<<KindLaunch) != 0 {
				f, err := openAgentFeed(pid)
				switch {
				case err != nil:
					fmt.Fprintf(stderr, "gpuevent_snoop: %v; its launches are probed instead\n", err)
				case f != nil:
					feeds = append(feeds, f)
					att.LaunchesFromAgent(pid)
					cfg.logf("process %d: launches from its gpubpf agent", pid)
				}
			}
			n, err := att.AttachProcess(pid, !perPID, cfg.logf)
			if err != nil {
				if errors.Is(err, procmaps.ErrNoProcess) {
					return fmt.Errorf("process %d does not exist: check the PID", pid)
				}
				return err
			}
			if n == 0 {
				exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
				return fmt.Errorf("%w in process %d (%s): looked in /proc/%d/maps for libcudart.so* and libcuda.so*, and in its executable for cudaMalloc/cudaLaunchKernel (static cudart); is it a CUDA program, and has it initialised CUDA yet? Start it under the tool instead: gpuevent_snoop -- CMD",
					errNoCUDA, pid, exe, pid)
			}
			res.Prime(uint32(pid))
		}
		target = "PID " + joinInts(cfg.pids)
	case len(cfg.argv) > 0:
		exe, _ := execPath(cfg.argv[0])
		lib, why := agentPreload(&cfg, perPID, exe, att)
		if lib == "" {
			cfg.logf("the command's launches are probed (%s)", why)
		}
		cmd, err = launch.Start(cfg.argv, launch.Options{Agent: lib != "", AgentLib: lib})
		if err != nil {
			return err
		}
		// From here on the child waits for Release; make sure it is never
		// left waiting or killed by our errors.
		defer cmd.Release()
		if err := addPID(cmd.PID()); err != nil {
			return err
		}
		if lib != "" {
			sw = newLaunchSwitch(cmd.PID(), ringEmptied.Load)
			cfg.logf("process %d: the gpubpf agent (%s) preloaded; its launches are probed until it takes them over", cmd.PID(), lib)
		}
		linkPID := cmd.PID()
		if !perPID {
			linkPID = 0
		}
		att.PrepareCommand(linkPID, exe, cfg.logf)
		if exe != "" {
			res.SetExe(uint32(cmd.PID()), exe, exe)
		}
		if len(att.Objects()) == 0 {
			fmt.Fprintf(stderr, "gpuevent_snoop: no CUDA library found yet for %s (looked for cudart symbols in it and for libcudart.so*/libcuda.so* in the linker cache, LD_LIBRARY_PATH, its RUNPATH and /usr/local/cuda*); watching for one it loads\n", cfg.argv[0])
		}
		target = fmt.Sprintf("PID %d (%s)", cmd.PID(), filepath.Base(cfg.argv[0]))
	default:
		for _, lib := range systemLibraries(nil) {
			if n, err := att.Attach(lib, lib, 0); err != nil {
				cfg.logf("%v", err)
			} else if n > 0 {
				cfg.logf("attached %d probes to %s%s", n, lib, att.pointNotes(lib))
			}
		}
		rescanAll(att, res, cfg.logf)
		target = "all processes"
	}

	rd, err := ringbuf.NewReader(objs.Events)
	if err != nil {
		return fmt.Errorf("opening the BPF ring buffer: %w", err)
	}
	defer rd.Close()

	kindsShown := []string{}
	for i, n := range kindNames {
		if cfg.kinds&(1<<i) != 0 {
			kindsShown = append(kindsShown, n)
		}
	}
	startMono := agentproto.MonoNow()
	tracingSince := time.Now()
	wall := time.Now().UnixNano() - int64(startMono)
	tr := NewTracer(stdout, res, cfg.opt, startMono, wall)
	// The start line goes to stderr in every mode: stdout stays pure JSON
	// with -j.
	toolkit.StartLine(stderr, fmt.Sprintf("Tracing CUDA %s calls in %s (%d probes on %s)",
		strings.Join(kindsShown, ", "), target, att.Probes(), describeObjects(att.Objects())))
	tr.Header()

	// The reader goroutine owns the tracer between interval prints; the
	// lock keeps -i's tables from interleaving with events.
	var mu = make(chan struct{}, 1)
	lock := func() { mu <- struct{}{} }
	unlock := func() { <-mu }
	if cfg.exp != nil {
		cfg.exp.Registry.MustRegister(newCollector(tr, cfg.exp, lock, unlock))
	}
	readerDone := make(chan error, 1)
	go func() {
		var rec ringbuf.Record
		var ev Event
		var lk Lookup
		// The deadline only matters when the reader waits: it is renewed
		// when the ring is empty, not per record.
		rd.SetDeadline(time.Now().Add(readerPoll))
		// emptied records that everything submitted before now has been
		// handled, if the ring is empty (a switch waits for it).
		emptied := func() {
			if sw == nil {
				return
			}
			now := agentproto.MonoNow()
			if rd.AvailableBytes() == 0 {
				ringEmptied.Store(now)
			}
		}
		for {
			if err := rd.ReadInto(&rec); err != nil {
				if errors.Is(err, os.ErrDeadlineExceeded) {
					// Events below the wakeup threshold are read on this timer.
					emptied()
					rd.SetDeadline(time.Now().Add(readerPoll))
					continue
				}
				if errors.Is(err, ringbuf.ErrFlushed) || errors.Is(err, ringbuf.ErrClosed) {
					readerDone <- nil
				} else {
					readerDone <- fmt.Errorf("reading the BPF ring buffer: %w", err)
				}
				return
			}
			if IsLookup(rec.RawSample) {
				if err := DecodeLookup(rec.RawSample, &lk); err != nil {
					cfg.logf("%v", err)
					continue
				}
				lock()
				res.AddLookup(&lk)
				why := ""
				if perPID && !tracingAll && lk.Ret == 0 {
					// A kernel looked up outside cudart is one the program
					// will launch through the driver itself.
					if _, on := att.DriverLaunchesIn(int(lk.PID)); !on {
						if site := res.SiteOf(lk.PID, lk.Caller); !isCudartInternal(site) {
							why = lk.API.Name + " called from " + site
							if sw != nil && lk.PID == sw.pid && isAgentSite(site) && sw.deferLookup(why) {
								why = ""
							}
						}
					}
				}
				unlock()
				if why != "" {
					// Here, not in the main loop, which may be busy reading
					// a new object: the driver launch may follow within
					// microseconds (see the README's limits).
					if err := att.EnableDriverLaunches(int(lk.PID), why); err != nil {
						cfg.logf("probing the driver's launch functions in process %d: %v", lk.PID, err)
					} else {
						cfg.logf("probing the driver's launch functions in process %d: %s", lk.PID, why)
					}
				}
				continue
			}
			if err := Decode(rec.RawSample, &ev); err != nil {
				cfg.logf("%v", err)
				continue
			}
			lock()
			if sw == nil || ev.API.Kind != KindLaunch || ev.PID != sw.pid || sw.probed(&ev) {
				tr.Handle(&ev)
			}
			if rd.AvailableBytes() == 0 {
				tr.Flush() // keep the stream live without a write per event under load
				rd.SetDeadline(time.Now().Add(readerPoll))
				emptied()
			}
			unlock()
		}
	}()

	drainFeed := func(f *agentFeed, final bool) {
		f.collect()
		lock()
		f.deliver(tr, res, final)
		unlock()
	}
	// The poller owns feeds while it runs; a switch adds its feed through
	// addFeed (the poller is running until the watcher has ended).
	feedStop, feedDone := make(chan struct{}), make(chan struct{})
	addFeed := make(chan *agentFeed)
	go func() {
		defer close(feedDone)
		var t *time.Ticker
		var tick <-chan time.Time // nil (never) while there is no feed
		defer func() {
			if t != nil {
				t.Stop()
			}
		}()
		for {
			if t == nil && len(feeds) > 0 {
				t = time.NewTicker(agentFeedPoll)
				tick = t.C
			}
			select {
			case <-feedStop:
				return
			case f := <-addFeed:
				feeds = append(feeds, f)
			case <-tick:
				for _, f := range feeds {
					drainFeed(f, false)
				}
			}
		}
	}()

	// Now that everything is attached, let the command run.
	childDone := make(chan error, 1)
	watchStop, watchDone := make(chan struct{}), make(chan struct{})
	if cmd != nil {
		if err := cmd.Release(); err != nil {
			return err
		}
		go func() { childDone <- cmd.Cmd.Wait() }()
	}
	if sw != nil {
		go func() {
			defer close(watchDone)
			sw.watch(switchDeps{
				att: att, lock: lock, unlock: unlock, handle: tr.Handle,
				addFeed:  func(f *agentFeed) { addFeed <- f },
				inflight: objs.Inflight,
				hits:     func() uint64 { h := readHits(objs.ApiHits); return h.launch() },
				prime:    func() { res.Prime(uint32(cmd.PID())) },
				logf:     cfg.logf,
			}, watchStop)
		}()
	} else {
		close(watchDone)
	}

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	var durC, intC <-chan time.Time
	if cfg.duration > 0 {
		durC = time.After(cfg.duration)
	}
	if cfg.interval > 0 {
		t := time.NewTicker(cfg.interval)
		defer t.Stop()
		intC = t.C
	}
	rescan := time.NewTicker(rescanPeriod(filter))
	defer rescan.Stop()
	// --prometheus, --otlp: the account's counts while tracing, as often
	// as the other tools refresh theirs (the whole account comes at the end)
	var accC <-chan time.Time
	if cfg.exp != nil {
		t := time.NewTicker(toolkit.MetricsEvery)
		defer t.Stop()
		accC = t.C
	}
	var readErr error
	readerExited := false
	childStatus := ""
	childCode := -1 // the command's exit status, once it exited
loop:
	for {
		select {
		case <-sigs:
			break loop
		case <-durC:
			break loop
		case err := <-childDone:
			childStatus, childCode = describeExit(err), exitCode(err)
			break loop
		case readErr = <-readerDone:
			readerExited = true
			break loop
		case now := <-intC:
			lock()
			tr.PrintSummary(true, now)
			unlock()
		case <-accC:
			cnt := readCounters(objs.Counters)
			lock()
			acc := countedAccount(tr, cnt, att)
			unlock()
			acc.Export(cfg.exp)
		case <-rescan.C:
			switch {
			case cmd != nil:
				if _, err := att.AttachProcess(cmd.PID(), !perPID, cfg.logf); err == nil {
					res.Refresh(uint32(cmd.PID()))
				}
			case len(cfg.pids) > 0:
				alive := 0
				for _, pid := range cfg.pids {
					if _, err := att.AttachProcess(pid, !perPID, cfg.logf); err == nil {
						res.Refresh(uint32(pid))
						alive++
					}
				}
				if alive == 0 {
					childStatus = "traced processes exited"
					break loop
				}
			default:
				rescanAll(att, res, cfg.logf)
			}
		}
	}
	// The switch first (it may be detaching probes), then detach the rest
	// so no new events arrive, then drain what is buffered.
	close(watchStop)
	<-watchDone
	att.Close()
	if !readerExited {
		if err := rd.Flush(); err == nil {
			readErr = <-readerDone
		}
	}
	close(feedStop)
	<-feedDone
	var agentLaunches, agentDropped uint64
	for _, f := range feeds {
		f.conn.StopLaunchEvents() // then the last records
		drainFeed(f, true)        // every probe event has been read by now
		agentLaunches += f.Launches
		agentDropped += f.ring.Dropped()
	}
	lock()
	defer unlock()
	tr.Flush()
	if cfg.opt.Summary || cfg.interval > 0 {
		tr.PrintSummary(false, time.Now())
	}
	if cfg.kinds&(1<<KindMalloc) != 0 {
		tr.PrintLeaks()
	}
	tr.Flush()

	// Completeness account.
	cnt := readCounters(objs.Counters)
	hits := readHits(objs.ApiHits)
	lay := att.Layers(len(tr.procs))
	acc := countedAccount(tr, cnt, att)
	if len(feeds) > 0 {
		acc.Note(fmt.Sprintf("launches from the gpubpf agent in %d of %d processes (%d, no probe hit)", len(feeds), len(tr.procs), agentLaunches))
		acc.Add(agentDropped, "launches lost", "the agent's launch ring was full")
	}
	// Each launch from the agent with its result; the probe events the
	// switch left out (the agent has them) were counted by the BPF side
	// too, and launches in flight at the switch were reported unchecked.
	cnt[cntLaunch] += agentLaunches
	cnt[cntLaunchChecked] += agentLaunches
	if sw != nil {
		cnt[cntLaunch] -= min(cnt[cntLaunch], sw.probedDropped)
		cnt[cntLaunchChecked] -= min(cnt[cntLaunchChecked], sw.droppedTimed+sw.orphans)
		acc.Note(sw.describe(cmd.PID(), startMono, hits.launch()))
	}
	accountLayers(acc.Note, lay, mode, cfg.launchEntry, cnt, &hits)
	if childStatus != "" {
		acc.Note("command " + childStatus)
	}
	stepped := steppedLaunches(lay, &hits)
	if cfg.opt.JSON {
		b := fmt.Appendf(nil, `{"type":"account","events":%d,"shown":%d,"dropped_ringbuf":%d,"lost_inflight":%d,"nested_folded":%d,"cudart_internal":%d,"returns_without_entry":%d,"processes":%d,"objects":%d`,
			tr.Seen, tr.Shown, cnt[cntRingbufFull], cnt[cntInflightFull], cnt[cntNested], tr.Internal, cnt[cntNoEntry], len(tr.procs), len(att.Objects()))
		b = append(b, `,"runtime_layer":`...)
		b = toolkit.AppendJSONString(b, lay.runtime)
		b = append(b, `,"driver_layer":`...)
		b = toolkit.AppendJSONString(b, lay.driver)
		b = append(b, `,"driver_launch_probes":`...)
		b = toolkit.AppendJSONString(b, lay.driverLaunches)
		b = fmt.Appendf(b, `,"launches":%d,"launches_from_agent":%d,"launches_lost_agent":%d,"launches_checked":%d,"probe_hits":%d,"launch_probe_hits":%d,"probe_hits_per_launch":%.3f,"single_stepped":[`,
			cnt[cntLaunch], agentLaunches, agentDropped, cnt[cntLaunchChecked], hits.total(), hits.launch(), hits.perLaunch(cnt[cntLaunch]))
		for i, s := range stepped {
			if i > 0 {
				b = append(b, ',')
			}
			b = toolkit.AppendJSONString(b, s)
		}
		b = append(b, ']')
		if sw != nil {
			b = sw.appendJSON(b, startMono, hits.launch())
		}
		b = append(b, "}\n"...)
		stdout.Write(b)
	}
	acc.Export(cfg.exp)
	fmt.Fprintln(stderr, acc.String())
	driverWhy := ""
	for _, pid := range tr.PIDs() {
		if why, ok := att.DriverLaunchesIn(int(pid)); ok {
			driverWhy = why
		}
	}
	if h := costHint(costFacts{
		launches: cnt[cntLaunch], secs: time.Since(tracingSince).Seconds(), hitsPerLaunch: hits.perLaunch(cnt[cntLaunch]),
		mode: mode, launchEntry: cfg.launchEntry, driverWhy: driverWhy, stepped: stepped,
	}); h != "" {
		fmt.Fprintln(stderr, "gpuevent_snoop: "+h)
	}
	if len(cfg.opt.Kernels) > 0 {
		if named, unnamed := tr.KernelCounts(); named+unnamed == 0 {
			if seen := tr.Unmatched(10); len(seen) > 0 && readErr == nil {
				// CLI.md: a pattern that matches no kernel is an error that
				// lists the names there were.
				return fmt.Errorf("no launched kernel matched -k %s; kernels launched: %s (patterns match mangled or demangled names, or globs of them)",
					strings.Join(cfg.opt.Kernels, ", "), strings.Join(seen, ", "))
			}
		}
	}
	if readErr != nil {
		return readErr
	}
	if childCode >= 0 && tr.Seen == 0 {
		// CLI.md: a trace of nothing is an error that says why
		return fmt.Errorf("%s exited (status %d) without a CUDA call the tool saw: nothing was traced; is it the CUDA program you meant?", cfg.argv[0], childCode)
	}
	if childCode > 0 {
		return cli.Exit("", childCode) // the command's status, as every tool passes it on
	}
	return nil
}

// exitCode is a finished command's exit status (128+signal when a signal
// ended it, as the shell says).
func exitCode(err error) int {
	var ee *exec.ExitError
	if err == nil {
		return 0
	}
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	return 1
}

// readerPoll bounds how long an event waits in the ring buffer when too few
// are buffered to wake the reader (see wakeup_bytes in the BPF program).
const readerPoll = 20 * time.Millisecond

// kernelAtLeast reports whether the running kernel's version is at least
// major.minor (false if it cannot be told).
func kernelAtLeast(major, minor int) bool {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return false
	}
	var ma, mi int
	if _, err := fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &ma, &mi); err != nil {
		return false
	}
	return ma > major || (ma == major && mi >= minor)
}

func b2u(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ", ")
}

func describeObjects(objs []string) string {
	if len(objs) == 0 {
		return "no CUDA object yet"
	}
	names := make([]string, len(objs))
	for i, o := range objs {
		names[i] = filepath.Base(o)
	}
	if len(names) > 4 {
		return strings.Join(names[:4], ", ") + fmt.Sprintf(" and %d more", len(names)-4)
	}
	return strings.Join(names, ", ")
}

func describeExit(err error) string {
	if err == nil {
		return "exited with status 0"
	}
	var ee interface{ ExitCode() int }
	if errors.As(err, &ee) && ee.ExitCode() >= 0 {
		return fmt.Sprintf("exited with status %d", ee.ExitCode())
	}
	return err.Error()
}

func execPath(name string) (string, error) {
	if strings.Contains(name, "/") {
		return filepath.Abs(name)
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", err
	}
	return filepath.Abs(p)
}

// rescanPeriod: a traced PID is re-read often, to catch a library it loads
// with dlopen before it calls into it; a system-wide /proc walk is costlier.
func rescanPeriod(filtered bool) time.Duration {
	if filtered {
		return 20 * time.Millisecond
	}
	return time.Second
}

// rescanAll attaches to CUDA objects of processes that appeared since the
// last scan (trace-all mode).
func rescanAll(att *Attacher, res *Resolver, logf func(string, ...any)) {
	pids, err := procmaps.PIDs()
	if err != nil {
		return
	}
	for _, pid := range pids {
		if pid == os.Getpid() {
			continue
		}
		if n, _ := att.AttachProcess(pid, true, logf); n > 0 {
			if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err == nil {
				exe = strings.TrimSuffix(exe, " (deleted)")
				res.SetExe(uint32(pid), procmaps.HostPath(pid, exe), exe)
			}
		}
	}
}
