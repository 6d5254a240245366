package runtime

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf/link"

	"github.com/gpubpf/gpubpf/pkg/links"
	"github.com/gpubpf/gpubpf/pkg/procmaps"
	"github.com/gpubpf/gpubpf/pkg/runtime/agentclient"
	"github.com/gpubpf/gpubpf/pkg/runtime/agentproto"
	"github.com/gpubpf/gpubpf/pkg/runtime/fatbin"
	"github.com/gpubpf/gpubpf/pkg/runtime/graphs"
	"github.com/gpubpf/gpubpf/pkg/runtime/instrument"
	"github.com/gpubpf/gpubpf/pkg/runtime/ptx"
	"github.com/gpubpf/gpubpf/pkg/runtime/sanpatch"
	"github.com/gpubpf/gpubpf/pkg/runtime/tritoncache"
)

// Process is one traced process: its agent connection (for GPU programs),
// its uprobes (for CPU programs) and the maps placed in it.
type Process struct {
	PID int
	s   *Session

	conn  *agentclient.Conn
	hold  bool
	start time.Time

	mu    sync.Mutex
	links []link.Link
	upErr error // last failure to attach uprobes (retried at module loads)
	// upFinal: uprobes failed where the process's libraries were all in
	// (a running process, or after a module load); the user was told, and
	// the trace ends with the error unless a later try succeeds.
	upFinal  bool
	upDone   map[string]bool // with OptionalUprobes: the programs attached...
	upTries  map[string]int  // ...and the attempts at the others
	devs     map[agentproto.Target]*device
	modules  map[uint64]bool
	clones   int
	launches map[probeKey]uint64 // agent counters, cached (see refreshLaunches)
	failures map[probeKey]uint64
	graphs   *graphs.Tracker // the executable graphs launched since the attach (refreshGraphs)
	stamps   *graphs.Stamps  // graph launch stamps for swapped nodes' runs (readGraphStamps)
	san      *sanpatch.Path  // kernels without PTX through the sanitizer (sanitizer.go)
	sanAcct  *agentproto.SanitizeReply
	// used: the devices the application uses (hello, then device-used
	// notifications); maps and clones of context-independent modules go
	// there and nowhere else, so attaching never opens contexts on GPUs
	// the program leaves alone.
	used map[int32]agentproto.Device
	// libs: instrumented context-independent modules, to place on each
	// device the application starts using later; placedOn: what is done.
	libs     []*preparedModule
	placedOn map[placeKey]bool
	// final holds each device map's contents as read at the application's
	// last module unload (exit): what ReadMaps shows once it is gone.
	final map[agentproto.Target]map[string][]byte
	stop  chan struct{}
	// placedNew wakes the drains when a context's maps are placed
	placedNew chan struct{}
	wg        sync.WaitGroup
	// drainMu: one drain at a time (poll, last looks and close all drain).
	drainMu sync.Mutex
	// lastSent: when the agent sent its last drain reply (drainMu)
	lastSent uint64
	closed   bool
	kt       kernelTimes // Options.KernelTimes (mu)
	// attached: when the agent answered; running: the program was running
	// then (-p), not started by the tool
	attached time.Time
	running  bool
	// lateSlow: reading the code of modules loaded before the agent would
	// take long (lateReadIsSlow, decided once)
	lateSlowOnce sync.Once
	lateSlow     bool
}

// AttachOptions say how to attach to a process.
type AttachOptions struct {
	// Hold: the process was started by the tool with the agent holding
	// module loads until the tool has instrumented them.
	Hold bool
	// Start is when the tool started, for the attach-latency figure.
	Start time.Time
	// Wait bounds how long to wait for the process's agent to come up (a
	// command the tool just started); 0 means it must be there now.
	Wait time.Duration
	// Context ends the wait for the agent and the instrumenting of the
	// modules loaded so far (Ctrl-C, -d); nil never ends.
	Context context.Context
}

// Attach attaches the session to process pid: GPU programs through the
// process's agent, CPU programs as uprobes. Kernels of modules loaded
// later are instrumented as they load.
func (s *Session) Attach(pid int, opts AttachOptions) (*Process, error) {
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
		return nil, fmt.Errorf("process %d does not exist", pid)
	}
	s.mu.Lock()
	if s.procs[pid] != nil {
		s.mu.Unlock()
		return nil, fmt.Errorf("process %d is already attached", pid)
	}
	s.mu.Unlock()
	if opts.Start.IsZero() {
		opts.Start = time.Now()
	}
	if opts.Context == nil {
		opts.Context = context.Background()
	}
	p := s.newProcess(pid, opts.Hold, opts.Start)
	// A command the tool started always has the agent (it holds the
	// program at its first module load, after exec, so uprobes go on the
	// real program); a running process needs one only for GPU programs.
	if len(s.gpu) > 0 || opts.Hold {
		// Module loads wait for the tool in a running process too: a
		// module loaded after the attach (NVRTC, Triton, a library
		// dlopened late) is instrumented before its first launch, as one
		// loaded before it is (a round trip per load; loads are rare
		// once a program runs).
		p.hold = true
		conn, err := s.dialOrInject(p, opts, agentclient.Options{Client: s.opts.Client, Hold: true, ManualDeviceReady: true})
		if err != nil {
			return nil, err
		}
		p.conn = conn
		p.attached, p.running = time.Now(), !opts.Hold
		// what the agent counted of graph launches before this trace (an
		// agent before protocol 12 counts none: an empty account)
		atAttach, _ := conn.Graphs()
		p.graphs = graphs.NewTracker(pid, atAttach)
		// Ctrl-C or -d while attaching: what attaching still asks of the
		// agent (a module's JIT may take LoadTimeout) must not hold the
		// tool longer than its wind-up.
		attaching := make(chan struct{})
		defer close(attaching)
		go func() {
			select {
			case <-opts.Context.Done():
				conn.SetDeadline(time.Now().Add(windUpTime))
			case <-attaching:
			}
		}()
		info := conn.Info()
		for _, d := range info.Devices {
			if d.Ordinal >= 0 && d.Ordinal < 64 && info.DevicesUsed&(1<<d.Ordinal) != 0 {
				p.used[d.Ordinal] = d
			}
		}
		if err := devicesExist(s.opts.Devices, info.Devices); err != nil && len(info.Devices) > 0 {
			conn.Close()
			return nil, fmt.Errorf("process %d: %w", pid, err)
		}
		s.logf("process %d: agent %s, driver %d, %d device(s), %d in use", pid, info.AgentVersion, info.DriverVersion, len(info.Devices), len(p.used))
	}
	if len(s.cpu) > 0 {
		// A command just started has not loaded libcuda yet: its uprobes
		// are tried again at each module load. A running process has its
		// libraries: a failure now is worth saying.
		if err := p.attachUprobes(!opts.Hold); err != nil && p.conn == nil {
			return nil, err
		}
	}
	s.mu.Lock()
	s.procs[pid] = p
	s.stats.Processes++
	s.mu.Unlock()
	if p.conn != nil {
		inv, err := p.conn.Inventory(true)
		if err != nil {
			select {
			case <-p.conn.Done():
				// It exited as we attached (a short program): what its
				// uprobes counted is the trace.
				inv = &agentproto.Inventory{}
			default:
				p.close()
				s.forget(pid)
				return nil, fmt.Errorf("process %d: listing its CUDA modules: %w", pid, err)
			}
		}
		if s.opts.KernelTimes == KernelTimesAlways || (p.lateTargeted(inv) && p.lateReadIsSlow()) {
			// before the modules are instrumented: a held program
			// launches nothing meanwhile, a running one's launches are
			// timed from now (see lateReadIsSlow)
			p.startKernelTimes()
		}
		for _, m := range inv.Modules {
			if opts.Context.Err() != nil {
				break // Ctrl-C or -d: the trace ends, instrumented so far
			}
			if !m.Unloaded {
				p.instrumentModule(m, inv)
			}
		}
		p.wg.Add(2)
		go p.watch()
		go p.poll()
	}
	return p, nil
}

func (s *Session) newProcess(pid int, hold bool, start time.Time) *Process {
	return &Process{PID: pid, s: s, hold: hold, start: start,
		devs: map[agentproto.Target]*device{}, modules: map[uint64]bool{}, launches: map[probeKey]uint64{}, failures: map[probeKey]uint64{}, stop: make(chan struct{}), placedNew: make(chan struct{}, 1),
		used: map[int32]agentproto.Device{}, placedOn: map[placeKey]bool{}}
}

func (s *Session) forget(pid int) {
	s.mu.Lock()
	delete(s.procs, pid)
	s.mu.Unlock()
}

// dialAgent connects to pid's agent, waiting up to wait for it to appear,
// or until ctx ends.
func dialAgent(ctx context.Context, pid int, opts agentclient.Options, wait time.Duration) (*agentclient.Conn, error) {
	deadline := time.Now().Add(wait)
	for {
		conn, err := agentclient.DialWith(pid, opts)
		if err == nil {
			return conn, nil
		}
		if time.Now().After(deadline) {
			return nil, err
		}
		if processExited(pid) { // gone, or our child that exited (a zombie)
			return nil, fmt.Errorf("process %d exited before its gpubpf agent answered: %w", pid, err)
		}
		select {
		case <-ctx.Done():
			return nil, &NoAgentYetError{PID: pid}
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// NoAgentYetError: the trace ended (Ctrl-C, -d) while waiting for the
// agent of a command the tool started; the command runs on untraced.
type NoAgentYetError struct{ PID int }

func (e *NoAgentYetError) Error() string {
	return fmt.Sprintf("the trace ended before the gpubpf agent of process %d answered: nothing was traced, and the process runs on untraced; give it longer with -d, or attach later with -p %d", e.PID, e.PID)
}

// attachUprobes attaches the session's CPU programs not attached yet.
// final: the process's libraries are all in by now, so a failure is said
// (once) and ends the trace with an error unless a later try succeeds.
func (p *Process) attachUprobes(final bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var err error
	if p.s.opts.OptionalUprobes {
		err = p.attachSomeUprobes()
	} else if p.links == nil {
		var links []link.Link
		if links, err = p.s.kern.attachUprobes(p.s.cpu, p.PID); err != nil {
			p.upErr = err
		} else {
			p.links, p.upErr = links, nil
			if links == nil {
				p.links = []link.Link{}
			}
			p.s.logf("process %d: %d uprobe(s) attached", p.PID, len(links))
		}
	}
	if err != nil && final && !p.upFinal {
		p.upFinal = true
		p.s.warnf("process %d: %v; tried again as the process loads CUDA modules", p.PID, err)
	}
	return err
}

const maxUprobeTries = 4

// attachSomeUprobes attaches the CPU programs not attached yet whose
// function the process defines by now (OptionalUprobes); p.mu is held.
func (p *Process) attachSomeUprobes() error {
	if p.upDone == nil {
		p.upDone, p.upTries = map[string]bool{}, map[string]int{}
	}
	var firstErr error
	for _, c := range p.s.cpu {
		// Each attempt reads the symbol tables of every mapped object: a
		// function absent after a few module loads (libcuda and the
		// application's own modules are in by then) stays absent.
		if p.upDone[c.Spec.Name] || p.upTries[c.Spec.Name] >= maxUprobeTries {
			continue
		}
		p.upTries[c.Spec.Name]++
		ls, err := p.s.kern.attachUprobes([]CPUProgram{c}, p.PID)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		p.links = append(p.links, ls...)
		p.upDone[c.Spec.Name] = true
		p.s.logf("process %d: uprobe %s attached", p.PID, c.Spec.SectionName)
	}
	if len(p.upDone) == 0 {
		p.upErr = firstErr
		return firstErr
	}
	p.upErr = nil
	return nil
}

// watch handles the agent's notifications: modules loaded later and
// instrumented launches the driver refused.
func (p *Process) watch() {
	defer p.wg.Done()
	for {
		select {
		case <-p.stop:
			return
		case <-p.conn.Done():
			if gone := p.s.opts.ProcessGone; gone != nil {
				go gone(p.PID)
			}
			return
		case n, ok := <-p.conn.Notifications():
			if !ok {
				return
			}
			switch {
			case n.ModuleLoaded != nil:
				m := *n.ModuleLoaded
				if len(p.s.cpu) > 0 {
					p.attachUprobes(true) // libcuda is mapped by now
				}
				inv, err := p.conn.Inventory(true)
				if err == nil {
					p.instrumentModule(m, inv)
				} else {
					p.s.logf("process %d: module %d: %v", p.PID, m.ID, err)
				}
				if p.hold {
					p.conn.Continue(m.ID)
				}
			case n.DeviceUsed != nil:
				p.deviceUsed(*n.DeviceUsed)
			case n.LateTables != nil:
				obj := n.LateTables.Object
				if obj == "" {
					obj = "an object of the process"
				}
				what := fmt.Sprintf("process %d: %s bound %d CUDA driver entry point(s) after the attach (a CUDA runtime that started late, or calls bound lazily): launches through them before the agent's rescan found them were not traced", p.PID, obj, n.LateTables.Count)
				p.s.warnf("%s", what)
				p.s.mu.Lock()
				p.s.stats.NotTraced = append(p.s.stats.NotTraced, what)
				p.s.mu.Unlock()
			case n.Graphs:
				p.unknownGraphs()
			case n.Unloading != 0:
				p.lastLook()
				p.conn.ReleaseUnload(n.Unloading)
				p.forgetModule(n.Unloading)
			case n.ProbeFailed != nil:
				msg := fmt.Sprintf("process %d: an instrumented launch failed (CUresult %d); the original kernel ran and the probe was switched off", p.PID, n.ProbeFailed.CUResult)
				p.s.mu.Lock()
				p.s.stats.ProbeFailures = append(p.s.stats.ProbeFailures, msg)
				p.s.mu.Unlock()
				p.s.logf("%s", msg)
			}
		}
	}
}

// skip records why a kernel was not instrumented.
func (p *Process) skip(kernel, why string) {
	p.s.mu.Lock()
	p.s.stats.KernelsSkipped[kernel] = why
	p.s.mu.Unlock()
	p.s.logf("process %d: skipping %s: %s", p.PID, kernel, why)
	p.needKernelTimes()
}

// moduleImage returns a module's code: fetched from the agent, or read from
// the file the application loaded.
func (p *Process) moduleImage(m agentproto.Module) ([]byte, error) {
	if m.Size > 0 {
		return p.conn.FetchImage(m.ID)
	}
	if m.Path != "" {
		return os.ReadFile(procmaps.HostPath(p.PID, m.Path))
	}
	return nil, fmt.Errorf("the agent kept no image of module %d", m.ID)
}

// codeOf splits a module image into its PTX texts (by kernel) and the list
// of kernels with where their code is.
type moduleCode struct {
	fatbins []*fatbin.Fatbin
	ptx     string // FormatPTX images
	kernels []fatbin.Kernel

	// what ptxFor reads of the fatbins, read once for all the module's
	// kernels, and each PTX element's text as a string
	indexOnce sync.Once
	index     *fatbin.Index
	texts     map[*fatbin.Element]string
	textsMu   sync.Mutex
}

func parseModule(m agentproto.Module, img []byte) (*moduleCode, error) {
	mc := &moduleCode{}
	switch formatOf(m, img) {
	case agentproto.FormatPTX:
		mc.ptx = strings.TrimRight(string(img), "\x00")
		for _, k := range fatbin.PTXEntries([]byte(mc.ptx)) {
			base, sig := fatbin.Demangle(k)
			mc.kernels = append(mc.kernels, fatbin.Kernel{Name: k, Demangled: base, Signature: sig, HasPTX: true})
		}
	case agentproto.FormatELF:
		names, sm, err := fatbin.CubinKernels(img)
		if err != nil {
			return nil, err
		}
		for _, k := range names {
			base, sig := fatbin.Demangle(k)
			mc.kernels = append(mc.kernels, fatbin.Kernel{Name: k, Demangled: base, Signature: sig, SASSArchs: []string{fmt.Sprintf("sm_%d", sm)}})
		}
	default:
		fbs, err := fatbin.Parse(img)
		if err != nil {
			return nil, err
		}
		return codeOfFatbins(fbs)
	}
	return mc, nil
}

// formatOf is the module's image format, told by its first bytes where the
// agent could not say (a module loaded from a file, cuModuleLoad: the file
// may be a cubin, PTX text or a fatbin; Triton's cubins come that way).
func formatOf(m agentproto.Module, img []byte) agentproto.ImageFormat {
	if m.Format != agentproto.FormatUnknown {
		return m.Format
	}
	switch {
	case bytes.HasPrefix(img, []byte("\x7fELF")):
		return agentproto.FormatELF
	case bytes.Contains(img[:min(len(img), 4096)], []byte(".version")) && bytes.Contains(img, []byte(".entry")):
		return agentproto.FormatPTX
	}
	return m.Format
}

// codeOfFatbins is the code of fatbin containers; elements that cannot be
// read are an error only when no kernel could be listed at all.
func codeOfFatbins(fbs []*fatbin.Fatbin) (*moduleCode, error) {
	mc := &moduleCode{fatbins: fbs}
	var err error
	if mc.kernels, err = fatbin.Inventory(fbs...); err != nil && len(mc.kernels) == 0 {
		return nil, err
	}
	return mc, nil
}

// moduleCode reads module m's code: the agent's copy of its image or its
// file, or, for a module loaded before the agent (injected later), the
// device code of the files the process maps.
func (p *Process) moduleCode(m agentproto.Module, inv *agentproto.Inventory) (*moduleCode, error) {
	if loadedBeforeAgent(m) {
		fbs, err := p.lateFatbins(m, inv)
		if err != nil {
			return nil, err
		}
		return codeOfFatbins(fbs)
	}
	img, err := p.moduleImage(m)
	if err != nil {
		return nil, err
	}
	m.Format = formatOf(m, img)
	mc, err := parseModule(m, img)
	if err == nil && m.Format == agentproto.FormatELF {
		p.tritonPTX(m, img, mc)
	}
	return mc, err
}

// tritonPTX gives a cubin's kernels the PTX Triton built it from, when the
// process's Triton cache holds the same cubin (tritoncache): torch.compile's
// kernels are then instrumented like any with PTX.
func (p *Process) tritonPTX(m agentproto.Module, img []byte, mc *moduleCode) {
	dirs := tritoncache.Dirs(p.PID)
	if len(dirs) == 0 {
		return
	}
	p.s.mu.Lock()
	if p.s.triton == nil {
		p.s.triton = tritoncache.New()
	}
	c := p.s.triton
	p.s.mu.Unlock()
	text, path, ok := c.PTXFor(img, dirs)
	if !ok {
		return
	}
	defined := map[string]bool{}
	for _, k := range fatbin.PTXEntries(text) {
		defined[k] = true
	}
	n := 0
	for i := range mc.kernels {
		if defined[mc.kernels[i].Name] {
			mc.kernels[i].HasPTX = true
			n++
		}
	}
	if n > 0 {
		mc.ptx = string(text)
		p.s.logf("process %d: module %d: %d kernel(s) from Triton's PTX %s", p.PID, m.ID, n, path)
	}
}

// ptxFor returns the PTX text that defines kernel for a device of maxSM,
// and the fatbin element it is (nil for a module loaded as PTX text):
// kernels of one element share a clone, and get the same string.
func (mc *moduleCode) ptxFor(kernel string, maxSM int) (text string, e *fatbin.Element, err error) {
	if mc.fatbins == nil {
		return mc.ptx, nil, nil
	}
	mc.indexOnce.Do(func() { mc.index = fatbin.NewIndex(mc.fatbins) })
	e, b, err := mc.index.PTXFor(kernel, maxSM)
	if err != nil {
		return "", nil, err
	}
	mc.textsMu.Lock()
	defer mc.textsMu.Unlock()
	if mc.texts == nil {
		mc.texts = map[*fatbin.Element]string{}
	}
	t, ok := mc.texts[e]
	if !ok {
		t = string(b)
		mc.texts[e] = t
	}
	return t, e, nil
}

// targets are the contexts a module's clones are loaded in: the module's
// own context, or for context-independent libraries every device the
// application uses (more come as it starts using them: deviceUsed).
func (p *Process) targets(m agentproto.Module) []agentproto.Target {
	if m.Ctx != 0 {
		return []agentproto.Target{contextTarget(m)}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]agentproto.Target, 0, len(p.used))
	for _, ord := range sortedKeys(p.used) {
		out = append(out, agentclient.OnDevice(int(ord)))
	}
	return out
}

// contextTarget is where the clones of a module loaded in a context go,
// named so that every module of one context shares one placement of the
// maps: a device's primary context, where cudart loads the libraries and
// where PTX and cubins loaded at run time land too, by its device (as the
// libraries' clones name it); a context the application created itself
// by its handle (and its device, for the readers).
func contextTarget(m agentproto.Module) agentproto.Target {
	if m.Primary && m.Device >= 0 {
		return agentclient.OnDevice(int(m.Device))
	}
	t := agentclient.InContext(m.Ctx)
	t.Device = max(m.Device, 0)
	return t
}

// maxSM is the SM version of a target's device (0: unknown, the newest
// PTX is taken).
func (p *Process) maxSM(t agentproto.Target) int {
	if t.Ctx != 0 {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if d, ok := p.used[int32(t.Device)]; ok {
		return int(d.Major*10 + d.Minor)
	}
	return 0
}

// deviceUsed handles the application's start on a device: clones of the
// context-independent modules already instrumented go there before the
// agent lets the application go on.
func (p *Process) deviceUsed(d agentproto.Device) {
	p.mu.Lock()
	p.used[d.Ordinal] = d
	libs := append([]*preparedModule(nil), p.libs...)
	p.mu.Unlock()
	for _, pm := range libs {
		p.placeModule(pm, agentclient.OnDevice(int(d.Ordinal)))
	}
	if err := p.conn.DeviceReady(d.Ordinal); err != nil {
		p.s.logf("process %d: device %d: %v", p.PID, d.Ordinal, err)
	}
}

// devicesExist checks that every device asked for (--device) is one of
// the process's.
func devicesExist(want []int, have []agentproto.Device) error {
	var ords []string
	for _, d := range have {
		ords = append(ords, fmt.Sprintf("%d (%s)", d.Ordinal, d.Name))
	}
	for _, w := range want {
		if !slices.ContainsFunc(have, func(d agentproto.Device) bool { return int(d.Ordinal) == w }) {
			return fmt.Errorf("--device %d: the process sees %d GPU(s): %s", w, len(have), strings.Join(ords, ", "))
		}
	}
	return nil
}

// probeSet is the GPU programs that run in one kernel, by site.
type probeSet struct{ entry, exit, mem []GPUProgram }

func (ps probeSet) key() string {
	var b strings.Builder
	for _, g := range ps.entry {
		b.WriteString("e:" + g.Spec.Name + ";")
	}
	for _, g := range ps.exit {
		b.WriteString("x:" + g.Spec.Name + ";")
	}
	for _, g := range ps.mem {
		b.WriteString("m:" + g.Spec.Name + ";")
	}
	return b.String()
}

func (ps *probeSet) add(g GPUProgram) {
	switch g.Site {
	case SiteExit:
		ps.exit = append(ps.exit, g)
	case SiteMem:
		ps.mem = append(ps.mem, g)
	default:
		ps.entry = append(ps.entry, g)
	}
}

// preparedModule is a module's code and which probes go into which of its
// kernels: worked out once, placed in each context it is used in.
type preparedModule struct {
	m      agentproto.Module
	inv    *agentproto.Inventory
	mc     *moduleCode
	byName map[string]fatbin.Kernel
	sets   map[string]probeSet
	// parsed: the same PTX serves every GPU of a process: parse each
	// text once.
	parsed map[string]*ptx.Module
}

type placeKey struct {
	module uint64
	target agentproto.Target
}

// instrumentModule instruments every kernel of module m that a GPU program
// of the session targets, in every context the module is used in. Errors
// are per kernel: they are recorded as skipped kernels and never stop the
// application.
func (p *Process) instrumentModule(m agentproto.Module, inv *agentproto.Inventory) {
	p.mu.Lock()
	if p.modules[m.ID] || p.closed {
		p.mu.Unlock()
		return
	}
	p.modules[m.ID] = true
	p.mu.Unlock()

	// The agent already knows the module's kernel names: when none is
	// targeted, leave its image (PyTorch's are hundreds of MB) unread.
	if inv != nil && !p.anyTargeted(m.ID, inv) {
		return
	}
	// A module loaded before the agent, in a process CUPTI times or is to
	// time (KernelTimesWhenNeeded, much code to read): its kernels are
	// timed without probes, so its code is left unread (on PyTorch,
	// seconds of the attach) and the kernels uninstrumented. Most such
	// modules are learnt here, at their first launch after the attach,
	// not in the attach's inventory (a program idle as the tool came).
	if p.cuptiBeforeReading(m) {
		p.startKernelTimes()
	}
	if loadedBeforeAgent(m) && p.s.opts.KernelTimes == KernelTimesWhenNeeded && p.kernelTimesOn() {
		p.s.logf("process %d: module %d (loaded before the agent): timed through CUPTI, its code not read", p.PID, m.ID)
		return
	}
	mc, err := p.moduleCode(m, inv)
	if err != nil {
		if loadedBeforeAgent(m) {
			// the user attached with -p and expects these kernels
			p.s.warnf("process %d: module %d: %v", p.PID, m.ID, err)
		} else {
			p.s.logf("process %d: module %d (%s): %v", p.PID, m.ID, m.Format, err)
		}
		// the kernels of it the user asked for are left out: the
		// account says which and why (also once another module's
		// kernel of the same name is instrumented)
		if ks := p.targetedKernels(m.ID, inv); len(ks) > 0 {
			p.s.mu.Lock()
			for _, k := range ks {
				p.s.stats.KernelsSkipped[k] = err.Error()
			}
			p.s.stats.NotTraced = append(p.s.stats.NotTraced, fmt.Sprintf("process %d, module %d (%s): %v", p.PID, m.ID, strings.Join(ks, ", "), err))
			p.s.mu.Unlock()
			p.needKernelTimes()
		}
		return
	}
	names := make([]string, 0, len(mc.kernels))
	pm := &preparedModule{m: m, inv: inv, mc: mc, byName: map[string]fatbin.Kernel{}, sets: map[string]probeSet{},
		parsed: map[string]*ptx.Module{}}
	p.s.mu.Lock()
	for _, k := range mc.kernels {
		names = append(names, k.Name)
		pm.byName[k.Name] = k
		p.s.stats.KernelsSeen[k.Name] = true
	}
	p.s.mu.Unlock()
	for _, g := range p.s.gpu {
		matched, _ := instrument.Match(p.s.kernelPatterns(g), names)
		for _, k := range matched {
			ps := pm.sets[k]
			ps.add(g)
			pm.sets[k] = ps
		}
	}
	if len(pm.sets) == 0 {
		return
	}
	// A kernel without PTX: CUPTI's records come on now, as the module is
	// read, not at its placement on a device: the modules a program
	// registers as it starts are read before its first CUDA call, so a
	// program started under the tool has every launch timed.
	for k := range pm.sets {
		if !pm.byName[k].HasPTX {
			p.needKernelTimes()
			break
		}
	}
	if m.Ctx == 0 {
		p.mu.Lock()
		p.libs = append(p.libs, pm)
		p.mu.Unlock()
	}
	for _, t := range p.targets(m) {
		p.placeModule(pm, t)
	}
}

// forgetModule lets go of an unloaded module's prepared code (its PTX,
// parsed, and the probes' clones of it): a program that loads and unloads
// libraries for hours would otherwise keep them all.
func (p *Process) forgetModule(id uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.libs = slices.DeleteFunc(p.libs, func(pm *preparedModule) bool { return pm.m.ID == id })
}

// placeModule loads and activates a prepared module's clones in one
// context (once).
func (p *Process) placeModule(pm *preparedModule, t agentproto.Target) {
	if !p.s.Traces(int(t.Device)) {
		return // --device: this GPU's launches run untouched
	}
	key := placeKey{pm.m.ID, t}
	p.mu.Lock()
	if p.placedOn[key] || p.closed {
		p.mu.Unlock()
		return
	}
	p.placedOn[key] = true
	p.mu.Unlock()
	// Group kernels by the PTX element that defines them and probe set:
	// one clone each.
	type group struct {
		text    string
		set     probeSet
		kernels []string
	}
	type groupKey struct {
		e   *fatbin.Element
		set string
	}
	groups := map[groupKey]*group{}
	var sass []string
	for k, set := range pm.sets {
		if !pm.byName[k].HasPTX {
			sass = append(sass, k)
			continue
		}
		text, e, err := pm.mc.ptxFor(k, p.maxSM(t))
		if err != nil {
			p.skip(k, err.Error())
			continue
		}
		gk := groupKey{e, set.key()}
		g := groups[gk]
		if g == nil {
			g = &group{text: text, set: set}
			groups[gk] = g
		}
		g.kernels = append(g.kernels, k)
	}
	if len(sass) > 0 {
		sort.Strings(sass)
		p.sanitize(pm, t, sass)
	}
	// in the order of their first kernels' names (each kernel is in one)
	order := make([]*group, 0, len(groups))
	for _, g := range groups {
		sort.Strings(g.kernels)
		order = append(order, g)
	}
	sort.Slice(order, func(i, j int) bool { return order[i].kernels[0] < order[j].kernels[0] })
	for _, g := range order {
		mod := pm.parsed[g.text]
		var err error
		if mod == nil {
			if mod, err = ptx.Parse(g.text); err != nil {
				err = fmt.Errorf("parsing the module's PTX: %w", err)
			} else {
				pm.parsed[g.text] = mod
			}
		}
		if err == nil {
			err = p.loadClone(pm.m, pm.inv, t, mod, g.set, g.kernels)
		}
		if err != nil {
			for _, k := range g.kernels {
				p.skip(k, err.Error())
			}
		}
	}
}

// kernelNames are the names the agent's inventory gives module id's kernels.
func kernelNames(id uint64, inv *agentproto.Inventory) []string {
	if inv == nil {
		return nil
	}
	var names []string
	seen := map[string]bool{}
	for _, k := range inv.Kernels {
		if k.ModuleID == id && k.Name != "" && !seen[k.Name] {
			seen[k.Name] = true
			names = append(names, k.Name)
		}
	}
	return names
}

// targetedKernels are module id's kernels, as the agent's inventory names
// them, that a GPU program of the session targets.
func (p *Process) targetedKernels(id uint64, inv *agentproto.Inventory) []string {
	names := kernelNames(id, inv)
	var out []string
	for _, g := range p.s.gpu {
		matched, _ := instrument.Match(p.s.kernelPatterns(g), names)
		for _, k := range matched {
			if !slices.Contains(out, k) {
				out = append(out, k)
			}
		}
	}
	return out
}

// anyTargeted reports whether a GPU program of the session may target a
// kernel of module id, going by the agent's inventory. A module whose
// kernels the agent could not list counts as targeted.
func (p *Process) anyTargeted(id uint64, inv *agentproto.Inventory) bool {
	names := kernelNames(id, inv)
	if len(names) == 0 {
		return true
	}
	p.s.mu.Lock()
	for _, n := range names {
		p.s.stats.KernelsSeen[n] = true
	}
	p.s.mu.Unlock()
	for _, g := range p.s.gpu {
		if matched, _ := instrument.Match(p.s.kernelPatterns(g), names); len(matched) > 0 {
			return true
		}
	}
	return false
}

// maxActivationsInFlight bounds the activation requests a clone keeps
// queued at the agent at once (a module can have thousands of kernels).
const maxActivationsInFlight = 64

// loadClone builds, loads and activates one instrumented clone.
func (p *Process) loadClone(m agentproto.Module, inv *agentproto.Inventory, t agentproto.Target, mod *ptx.Module, set probeSet, kernels []string) error {
	dev, err := p.device(t)
	if err != nil {
		return err
	}
	if p.s.opts.Clocks && dev.clocked.CompareAndSwap(false, true) {
		if _, err := p.calibrate(dev, clockRounds); err != nil {
			p.s.logf("%v", err)
		}
	}
	entry, err := dev.probe(set.entry, "entry")
	if err != nil {
		return err
	}
	exit, err := dev.probe(set.exit, "exit")
	if err != nil {
		return err
	}
	mem, err := dev.probe(set.mem, "mem")
	if err != nil {
		return err
	}
	// The clone must use the application's copies of the module variables
	// its kernels use, by address.
	resolve := func(vars []string) (map[string]uint64, error) {
		gs, err := p.conn.Globals(m.ID, t, vars...)
		if err != nil {
			return nil, fmt.Errorf("looking up the module's variables %s: %w", strings.Join(vars, ", "), err)
		}
		globals := map[string]uint64{}
		for _, g := range gs {
			if g.CUResult == 0 {
				globals[g.Name] = g.Addr
			}
		}
		return globals, nil
	}
	maxPTX := [2]int{0, 0}
	if isa := p.conn.Info().PTXISAMax; isa > 0 {
		maxPTX = [2]int{int(isa / 10), int(isa % 10)}
	}
	res, err := instrument.InstrumentModule(mod, instrument.Request{Kernels: kernels, Entry: entry, Exit: exit, MemAccess: mem, ResolveGlobals: resolve, MaxPTX: maxPTX})
	if err != nil {
		return err
	}
	lr, err := p.conn.LoadPTX(t, []byte(res.PTX), res.Kernels...)
	var refused *agentproto.Error
	switch {
	case errors.As(err, &refused):
		return fmt.Errorf("the driver's JIT refused the instrumented PTX: %w", err)
	case err != nil: // the agent did not answer, or is gone: no verdict on the PTX
		return fmt.Errorf("loading the instrumented PTX: %w", err)
	}
	fn := map[string]uint64{}
	for _, f := range lr.Functions {
		fn[f.Name] = f.Handle
	}
	if p.s.opts.Log != nil { // -v: the attach path parses nothing it will not print
		for _, l := range jitResources(lr.InfoLog) {
			p.s.logf("process %d: JIT: %s", p.PID, l)
		}
	}
	// One activation per launch handle, all in flight at once: the agent
	// serves them in order and each costs it microseconds, while a round
	// trip each cost about a millisecond on the GPU machine (a 200-kernel
	// module took 227 ms to attach, its JIT 3 ms of that).
	var todo []agentproto.Kernel
	for _, k := range inv.Kernels {
		if k.ModuleID != m.ID || fn[k.Name] == 0 {
			continue
		}
		if k.Kind == agentproto.KindFunction && k.Ctx != 0 && k.Ctx != lr.Ctx {
			continue
		}
		todo = append(todo, k)
	}
	errs := make([]error, len(todo))
	var wg sync.WaitGroup
	inFlight := make(chan struct{}, maxActivationsInFlight)
	for i, k := range todo {
		var lw agentproto.LaunchWords
		if lay, ok := res.Launch[k.Name]; ok {
			lw = dev.launchWords(lay)
		}
		wg.Add(1)
		inFlight <- struct{}{}
		go func() {
			defer func() { <-inFlight; wg.Done() }()
			errs[i] = p.conn.ActivateWith(k.Handle, lr.CloneID, fn[k.Name], lw)
		}()
	}
	wg.Wait()
	activated := 0
	var busy []string
	for i, err := range errs {
		k := todo[i]
		if err != nil {
			var ae *agentproto.Error
			if errors.As(err, &ae) && ae.Status == agentproto.StatusUnsupported {
				// Another tool has this kernel: the others of the
				// module are still ours.
				busy = append(busy, k.Name)
				p.s.mu.Lock()
				p.s.stats.KernelsSkipped[k.Name] = ae.Message
				p.s.mu.Unlock()
				p.s.warnf("process %d: %s", p.PID, ae.Message)
				continue
			}
			return fmt.Errorf("activating the probe on %s: %w", k.Name, err)
		}
		activated++
	}
	if activated == 0 {
		p.conn.Unload(lr.CloneID)
		if len(busy) > 0 {
			return fmt.Errorf("%s instrumented by another tool already", strings.Join(busy, ", "))
		}
		return fmt.Errorf("the agent has no launch handle for %s yet", strings.Join(kernels, ", "))
	}
	now := time.Now()
	p.mu.Lock()
	p.clones++
	p.mu.Unlock()
	p.s.mu.Lock()
	for _, k := range res.Kernels {
		if slices.Contains(busy, k) {
			continue
		}
		p.s.stats.KernelsMatched[k] = true
		delete(p.s.stats.KernelsSkipped, k)
	}
	p.s.stats.Clones++
	p.s.stats.JIT += time.Duration(lr.LoadNanos)
	if !p.s.stats.firstAttachDone {
		p.s.stats.firstAttachDone = true
		p.s.stats.FirstAttach = now.Sub(p.start)
	}
	p.s.mu.Unlock()
	sites := ""
	if mem != nil {
		sites = fmt.Sprintf(", %d memory-access site(s)", res.Sites.Mem)
	}
	p.s.logf("process %d: %s instrumented (%d handle(s), JIT %.1f ms, %d variable(s) aliased%s)",
		p.PID, strings.Join(res.Kernels, ", "), activated, float64(lr.LoadNanos)/1e6, len(res.Aliased), sites)
	return nil
}

// probeKey names one active probe: a kernel handle in a context.
type probeKey struct{ kernel, ctx uint64 }

// refreshLaunches caches the agent's per-probe counters: they go with the
// process, and the tool reports them after it has exited.
func (p *Process) refreshLaunches() {
	if p.conn == nil {
		return
	}
	probes, err := p.conn.Stats()
	if err != nil {
		return
	}
	// A kernel probed again after a deactivate has a retired entry and a
	// live one: its counts are their sum.
	launches, failures := map[probeKey]uint64{}, map[probeKey]uint64{}
	for _, pr := range probes {
		k := probeKey{pr.Kernel, pr.Ctx}
		launches[k] += pr.Launches
		failures[k] += pr.Failures
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, n := range launches {
		p.launches[k] = max(p.launches[k], n)
		p.failures[k] = max(p.failures[k], failures[k])
	}
}

// refreshGraphs caches the agent's graph counts (they go with the process).
func (p *Process) refreshGraphs() {
	if p.conn == nil || p.graphs == nil {
		return
	}
	execs, err := p.conn.Graphs()
	if err != nil {
		return
	}
	p.mu.Lock()
	p.graphs.Update(execs)
	p.mu.Unlock()
}

// unknownGraphs: the application launched a graph the agent never saw made
// (instantiated before an injected agent came): no probe can reach its
// kernels, so a tool timing kernels (launchlate) has CUPTI's records time
// them, as it would a kernel without PTX.
func (p *Process) unknownGraphs() {
	p.s.logf("process %d: a CUDA graph made before the agent came was launched: its kernels are not instrumented", p.PID)
	p.needKernelTimes()
}

// stopProbes ends the GPU side of the trace in a process that runs on:
// its kernels go back to the originals, so the maps read after this (the
// agent's reads wait for the instrumented launches already queued) hold
// every launch the final counters count, and none comes after them.
func (p *Process) stopProbes() {
	select {
	case <-p.conn.Done():
		return
	default:
	}
	if _, err := p.conn.Deactivate(0); err != nil {
		p.s.logf("process %d: turning the probes off at the end of the trace: %v", p.PID, err)
	}
	p.refreshLaunches()
	p.refreshSanitizer(true)
}

// addStats adds this process's agent-side counters and ring drops.
func (p *Process) addStats(st *Stats) {
	p.refreshLaunches()
	p.refreshGraphs()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.graphs != nil {
		st.Graphs = append(st.Graphs, p.graphs.Execs()...)
	}
	if p.sanAcct != nil {
		if st.Sanitizer == nil {
			st.Sanitizer = map[int]agentproto.SanitizeReply{}
		}
		st.Sanitizer[p.PID] = *p.sanAcct
	}
	for _, n := range p.launches {
		st.Launches += n
	}
	for _, n := range p.failures {
		st.LaunchFailures += n
	}
	for _, d := range p.devs {
		for _, m := range d.maps {
			m.ring.addStats(st)
		}
		d.printk.ring.addStats(st)
	}
}

// close detaches: the agent restores the original kernels (also what it
// does by itself if the tool dies) and frees what the session placed.
func (p *Process) close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	var err error
	if p.conn != nil {
		// Drain the rings one last time so nothing the GPU produced is lost.
		p.drain(true)
		p.refreshLaunches()
		p.refreshGraphs()
		select {
		case <-p.conn.Done(): // the process is gone: nothing to restore (its last look folded)
		default:
			p.fold(false)
			if derr := p.conn.Detach(); derr != nil && !errors.Is(derr, os.ErrClosed) {
				err = derr
			}
		}
		close(p.stop)
		p.conn.Close()
		p.wg.Wait()
	}
	p.mu.Lock()
	links.CloseAll(p.links)
	p.links = nil
	for _, d := range p.devs {
		d.release()
	}
	// its counters stay (Stats) and its maps' last copies (ReadMaps), not
	// its modules' code: --all keeps every process that came and went
	p.libs = nil
	p.mu.Unlock()
	return err
}
