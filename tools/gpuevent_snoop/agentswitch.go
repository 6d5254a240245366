package gpuevent_snoop

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/gpubpf/gpubpf/pkg/procmaps"
	"github.com/gpubpf/gpubpf/pkg/runtime/agentclient"
	"github.com/gpubpf/gpubpf/pkg/runtime/agentlib"
	"github.com/gpubpf/gpubpf/pkg/runtime/agentproto"
	"github.com/gpubpf/gpubpf/pkg/toolkit"
)

// A command started by the tool (-- CMD) runs with the gpubpf agent
// preloaded: once the agent is up and the program has loaded the CUDA
// driver, its launches come from the agent's launch events (agentfeed.go)
// instead of uprobes, which cost a trap per launch. Until then the launch
// probes stay, so nothing is missed when the agent never comes up (a
// program that clears LD_PRELOAD on the way). A launchSwitch decides, for
// the launches around the moment the agent took over, which of the two
// reports each one, so that none is lost and none is reported twice.
//
// What is known at the switch: the agent's reply says when it turned its
// events on (attachNs, read right after the flag its wrappers test became
// visible); every launch whose wrapper starts later is in its ring, and
// every record in the ring is of a launch whose wrapper started after the
// flag was set (so at most a few ns before attachNs). A launch's uprobe
// event carries the time its probe fired:
//   - a runtime launch (cudaLaunchKernel) is probed before cudart calls the
//     driver, so before the agent's wrapper: a probe time at or after
//     attachNs proves the agent has the launch, and the probe's event is
//     left out. One before attachNs may or may not be in the agent's ring
//     (cudart may have reached the wrapper after the flag, after module
//     loading or a preemption). A thread makes one launch at a time, and
//     until probesUntil every launch was probed: a record taken before
//     probesUntil whose thread's latest probe event before it is such a
//     launch, of the same grid, block and shared memory, is that launch,
//     and is left out.
//   - a driver launch is probed on libcuda's function, which the agent's
//     wrapper calls after it took its record's time: the probe time lies
//     within the record's call (ts to ts + dur) on the same thread. Such
//     records are left out: the probe event was reported.
//
// All of it runs under the tracer's lock. The records of the process are
// held back until the reader has emptied the BPF ring after the launch
// probes were detached (ready), so every probe event they are matched
// against has been seen.
type launchSwitch struct {
	pid   uint32
	state switchState
	// attachNs: the agent's events on; probesUntil: the launch probes
	// were all attached until then; detachNs: none was after (the tool's
	// clock, the same CLOCK_MONOTONIC), once detached.
	attachNs, probesUntil, detachNs uint64
	detached                        bool
	// seen is the probed launches of each thread near the switch, in
	// time order: the latest before the switch began, all after.
	seen map[uint32][]seenLaunch
	// ringEmptied reads when the reader last found the BPF ring empty
	// (everything submitted before it handled).
	ringEmptied func() uint64

	probedKept    uint64 // launches reported from probes (before the switch, or not in the agent's ring)
	probedDropped uint64 // probe events left out: the agent's ring has them
	droppedTimed  uint64 // of those, with their return taken (BPF counted them checked)
	fedDropped    uint64 // agent records left out: the probes reported them
	orphans       uint64 // launches whose return probe went with the links (synthesized from entry)

	// For the account.
	hitsBefore uint64 // launch probe hits when the probes were detached
	why        string // why the agent did not take over ("" if it did)
	// lookupWhy is a kernel lookup that came through the agent's wrapper,
	// held back as a sign of the program's own driver launches (see
	// deferLookup).
	lookupWhy string
}

type switchState uint8

const (
	switchWaiting switchState = iota // probes only
	switchPending                    // launch events asked for: attachNs not known yet
	switchOn                         // the agent reports the launches
)

// switchGrace is how long the launch probes stay after the agent's events
// came on. Launches made meanwhile are reported once all the same (probe
// events at and after attachNs are matched or left out), each at the cost
// of a probe hit; but a thread held up at the switch (the tool itself is
// busy then, and preempts the program's threads) may otherwise lose a
// launch or report it twice:
//   - a driver launch is probed on libcuda's function, which the agent's
//     wrapper calls after testing its flag: one that tested it before it
//     was set and then waited past the detach reaches libcuda unprobed
//     and unrecorded (2-CPU test VM, probes detached at once: 1 launch lost
//     in about 6 runs of 80 000);
//   - a runtime launch probed before attachNs that reaches the agent's
//     wrapper only after the detach cannot be told from a later launch
//     nothing probed, and is reported twice (launch_heavy's 200 001, no
//     grace: 2 runs in 30).
//
// None of either in 60 runs with it. On the H100, launch_heavy's CUDA
// initialisation outlasted it (0.00 probe hits per launch).
// The CPU proxy, which launches from its first millisecond, pays for it
// (BenchmarkLaunchRateCPUProxy: the default at 0.75-0.78 of the untraced
// rate with it, 0.91 without).
const switchGrace = 100 * time.Millisecond

// switchReadyAfter: records are delivered without the reader's go-ahead
// once this long has passed since the detach (a ring buffer that never
// empties): a launch the probes saw may then be reported twice.
const switchReadyAfter = 2 * time.Second

type seenLaunch struct {
	ts      uint64
	driver  bool // probed in libcuda (inside the agent's wrapper)
	dropped bool // left out: the agent has it
	paired  bool // matched with an agent record, or closed to matching
	shape   launchShape
}

// launchShape is what a launch's two reports share: a runtime launch's
// function (the host stub) and stream are not what cudart passes on.
type launchShape struct {
	fn, stream  uint64
	grid, block [3]uint32
	shmem       uint64
}

func shapeOf(e *Event) launchShape {
	s := launchShape{grid: e.Grid, block: e.Block, shmem: e.Shmem}
	if e.API.Driver {
		s.fn, s.stream = e.Func, e.Stream
	}
	return s
}

func newLaunchSwitch(pid int, ringEmptied func() uint64) *launchSwitch {
	return &launchSwitch{pid: uint32(pid), ringEmptied: ringEmptied, seen: map[uint32][]seenLaunch{}}
}

// begin is called before the launch events are asked for: from now on
// every probed launch is remembered, since the agent's ring may have it.
func (s *launchSwitch) begin() {
	s.state = switchPending
}

// abort goes back to probes only (the agent refused or went away).
func (s *launchSwitch) abort(why string) {
	s.state = switchWaiting
	s.seen = map[uint32][]seenLaunch{}
	s.why = why
}

// attached records when the agent's events came on.
func (s *launchSwitch) attached(ns uint64) {
	s.state = switchOn
	s.attachNs = ns
}

// probed says whether a launch event from the probes of the process is
// reported (false: the agent's ring has it).
func (s *launchSwitch) probed(e *Event) bool {
	u := seenLaunch{ts: e.TS, driver: e.API.Driver, shape: shapeOf(e)}
	if s.state == switchWaiting {
		// Only the thread's latest matters: it may still be in cudart
		// (loading a module) when the switch comes.
		if s.why == "" {
			if l := s.seen[e.TID]; len(l) == 1 {
				if l[0].ts < u.ts {
					l[0] = u
				}
			} else {
				s.seen[e.TID] = []seenLaunch{u}
			}
		}
		s.probedKept++
		return true
	}
	u.dropped = s.state == switchOn && !e.API.Driver && e.TS >= s.attachNs
	s.remember(e.TID, u)
	if u.dropped {
		s.probedDropped++
		if !e.EntryOnly {
			s.droppedTimed++
		}
		return false
	}
	s.probedKept++
	return true
}

// fed says whether a record of the agent's, as an event, is reported
// (false: the probes reported that launch).
func (s *launchSwitch) fed(e *Event) bool {
	// No launch was probed after the detach: a record taken since pairs
	// with no probe event.
	if s.state != switchOn || (s.detached && e.TS >= s.detachNs) {
		return true
	}
	l := s.seen[e.TID]
	// The first probed launch of the thread after the record's start.
	i := sort.Search(len(l), func(i int) bool { return l[i].ts > e.TS })
	if e.API.Driver {
		// Its own probe, if it had one, fired within its call.
		want := shapeOf(e)
		for j := i; j < len(l) && l[j].ts <= e.TS+e.Dur; j++ {
			if u := &l[j]; u.driver && !u.paired && u.shape == want {
				u.paired = true
				s.fedDropped++
				return false
			}
		}
		// A probe at the very time the record was taken.
		if i > 0 && l[i-1].ts == e.TS && l[i-1].driver && !l[i-1].paired && l[i-1].shape == want {
			l[i-1].paired = true
			s.fedDropped++
			return false
		}
		return true
	}
	// The thread's latest probed launch before the record: its own
	// runtime probe if it had one (a thread makes one launch at a time).
	if i == 0 {
		return true
	}
	last := &l[i-1]
	if last.driver || last.paired {
		return true
	}
	// Whatever follows, no later record is this launch's.
	last.paired = true
	if last.dropped {
		return true // the probe event was left out: this is its report
	}
	// Past probesUntil the record may be of a later launch that nothing
	// probed, this one never having reached the agent's wrapper after the
	// flag: reported twice rather than lost, if it was this one after all
	// (a launch held in cudart across the whole switch).
	if (s.detached && e.TS >= s.probesUntil) || last.shape != shapeOf(e) {
		return true
	}
	s.fedDropped++
	return false
}

// deferLookup holds back a kernel lookup whose call site is the agent's
// wrapper (cudart's lookups too reach the driver through it, so it shows
// nothing about who launches): the agent reports the driver launches once
// it takes over, and probing the driver's launch functions until then
// would cost cudart's launches a second probe hit, and let one whose
// runtime probe came just before them be reported twice (its driver call
// names no cudart caller either). If the agent never takes over, the
// lookup counts after all (abort). false: it counts now.
func (s *launchSwitch) deferLookup(why string) bool {
	if s.why != "" {
		return false
	}
	if s.lookupWhy == "" {
		s.lookupWhy = why
	}
	return true
}

// isAgentSite says whether a call site is in the gpubpf agent library
// (libgpubpf-agent.so, or the copy a tool extracted, named by its hash).
func isAgentSite(site string) bool {
	return strings.Contains(site, "(libgpubpf-agent")
}

// remember adds a probed launch to its thread's list, kept in time order
// (events of one thread come in that order but for a launch in flight at
// the detach, taken from its entry).
func (s *launchSwitch) remember(tid uint32, u seenLaunch) {
	l := append(s.seen[tid], u)
	for i := len(l) - 1; i > 0 && l[i-1].ts > l[i].ts; i-- {
		l[i-1], l[i] = l[i], l[i-1]
	}
	s.seen[tid] = l
}

// ready says whether the agent's records can be matched: every probe event
// of the process has been handled (the reader emptied the ring after the
// probes were detached).
func (s *launchSwitch) ready() bool {
	if s.state != switchOn || !s.detached {
		return false
	}
	return s.ringEmptied() > s.detachNs || agentproto.MonoNow() > s.detachNs+uint64(switchReadyAfter)
}

// describe is the account's note on the switch: when the agent took over
// and what the probes reported before, or why it never did. hits is the
// launch probe hits at the end.
func (s *launchSwitch) describe(pid int, startMono, hits uint64) string {
	if s.state != switchOn {
		why := s.why
		if why == "" {
			why = "the gpubpf agent did not take over"
		}
		return fmt.Sprintf("process %d: %s: launches probed", pid, why)
	}
	from := "from the start"
	if s.attachNs > startMono {
		from = fmt.Sprintf("from +%.1f ms", float64(s.attachNs-startMono)/1e6)
	}
	return fmt.Sprintf("process %d: launches from its gpubpf agent %s (%d launch probe hits since), %d before that from probes",
		pid, from, hits-min(hits, s.hitsBefore), s.probedKept)
}

// appendJSON adds the switch to the JSON account: agent (the note above),
// agent_from_ms (since the tool started; null if it never took over),
// launches_before_agent and launch_probe_hits_after_agent.
func (s *launchSwitch) appendJSON(b []byte, startMono, hits uint64) []byte {
	b = append(b, `,"agent":`...)
	b = toolkit.AppendJSONString(b, s.describe(int(s.pid), startMono, hits))
	if s.state != switchOn {
		return append(b, `,"agent_from_ms":null,"launches_before_agent":null,"launch_probe_hits_after_agent":null`...)
	}
	from := 0.0
	if s.attachNs > startMono {
		from = float64(s.attachNs-startMono) / 1e6
	}
	return fmt.Appendf(b, `,"agent_from_ms":%.3f,"launches_before_agent":%d,"launch_probe_hits_after_agent":%d`,
		from, s.probedKept, hits-min(hits, s.hitsBefore))
}

// agentPreload returns the agent library to preload into a command, or ""
// with the reason it is not (for -v). Only where the agent can take the
// launches over: launches traced, per-process links (the launch probes of
// this process alone can be detached), the user did not ask for probes
// (--no-agent, --driver-launches) or for what only probes give (-a kernel
// arguments, -s stacks: the agent's records carry neither), the dynamic
// linker honours LD_PRELOAD, and the program's launches reach the agent's
// wrappers.
func agentPreload(cfg *traceConfig, perPID bool, exe string, att *Attacher) (string, string) {
	switch {
	case cfg.kinds&(1<<KindLaunch) == 0:
		return "", "launches are not traced"
	case !perPID:
		return "", "this kernel's uprobes cannot name the process (Linux 6.10+ with uprobe_multi)"
	case cfg.noAgent:
		return "", "--no-agent"
	case cfg.driverLaunches:
		return "", "--driver-launches"
	case cfg.opt.Args > 0:
		return "", "-a: kernel arguments come from the launch probes"
	case cfg.opt.Stack:
		return "", "-s: stacks come from the probes"
	case exe == "":
		return "", "the executable was not found"
	}
	if why := secureExec(exe); why != "" {
		return "", why + ": the dynamic linker ignores LD_PRELOAD"
	}
	if staticELF(exe) {
		return "", "the executable is statically linked: no dynamic linker preloads anything"
	}
	// The agent reaches the driver by symbol (LD_PRELOAD, dlsym,
	// cuGetProcAddress): an executable's calls to a driver of its own are
	// bound at link time and never pass its wrappers.
	if fn := att.definesDriverLaunch(exe); fn != "" {
		return "", "the executable defines " + fn + " itself, which the agent cannot interpose"
	}
	lib, err := agentlib.Path()
	if err != nil {
		return "", err.Error()
	}
	return lib, ""
}

// secureExec says why the kernel runs exe in secure-execution mode, where
// the dynamic linker ignores LD_PRELOAD ("" if it does not).
func secureExec(exe string) string {
	st, err := os.Stat(exe)
	if err != nil {
		return ""
	}
	if st.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
		return "the executable is setuid or setgid"
	}
	if n, err := unix.Getxattr(exe, "security.capability", nil); err == nil && n > 0 {
		return "the executable has file capabilities"
	}
	return ""
}

// staticELF says whether exe is an ELF executable without an interpreter
// (false for anything else: scripts start an interpreter that preloads).
func staticELF(exe string) bool {
	f, err := elf.Open(exe)
	if err != nil {
		return false
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false
		}
	}
	return true
}

// switchDeps is what the watcher needs from the tracing session.
type switchDeps struct {
	att    *Attacher
	lock   func()
	unlock func()
	// handle reports an event (lock held); addFeed registers a feed with
	// the feed poller.
	handle   func(*Event)
	addFeed  func(*agentFeed)
	inflight *ebpf.Map
	hits     func() uint64 // launch probe hits so far
	// prime reads the process's mappings while it runs: the agent's
	// records carry no load address, and a program that exits before the
	// next rescan would leave its kernels' host stubs unnamed.
	prime func()
	logf  func(string, ...any)
}

// agentWaitSocket bounds the wait for the agent's socket, which it creates
// as the program starts (its constructor): a program that has none by then
// did not load it.
const agentWaitSocket = 30 * time.Second

// watch waits for the agent in the command (its socket, then the CUDA
// driver in the process: before that no launch can pass the agent's
// wrappers, while cudart can still fail a launch the probes see), then
// switches the process's launches over to it. It returns when done, when
// the agent cannot take over, or when stop is closed.
func (s *launchSwitch) watch(d switchDeps, stop <-chan struct{}) {
	pid := int(s.pid)
	fail := func(why string) {
		d.lock()
		s.abort(why)
		lookup := s.lookupWhy
		d.unlock()
		d.logf("process %d: %s", pid, why)
		if lookup != "" {
			if err := d.att.EnableDriverLaunches(pid, lookup); err != nil {
				d.logf("probing the driver's launch functions in process %d: %v", pid, err)
			}
		}
	}
	sock := agentclient.SocketPath(pid)
	deadline := time.Now().Add(agentWaitSocket)
	poll := 2 * time.Millisecond
	sleep := func() bool {
		select {
		case <-stop:
			return false
		case <-time.After(poll):
			return true
		}
	}
	for {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			fail(fmt.Sprintf("the gpubpf agent did not load (no %s after %v)", sock, agentWaitSocket))
			return
		}
		if !sleep() {
			fail("the gpubpf agent did not start before the program ended")
			return
		}
	}
	// Polled often at first (programs initialise CUDA early), then at the
	// rescan period: a program may run on the CPU for long before.
	started := time.Now()
	for !mapsCUDADriver(pid) {
		if time.Since(started) > 200*time.Millisecond {
			poll = rescanPeriod(true)
		}
		if !sleep() {
			fail("the program never loaded the CUDA driver, whose launch functions the gpubpf agent wraps")
			return
		}
	}
	var f *agentFeed
	for {
		var err error
		if f, err = dialAgentFeed(pid); err == nil {
			break
		}
		// A socket left by an earlier process with this PID refuses until
		// the agent replaces it.
		var none *agentclient.NoAgentError
		if !errors.As(err, &none) || time.Now().After(deadline) {
			fail(fmt.Sprintf("%v", err))
			return
		}
		if !sleep() {
			fail("the program ended before the gpubpf agent answered")
			return
		}
	}
	d.lock()
	s.begin()
	d.unlock()
	at, err := f.subscribe()
	if err == nil && at == 0 {
		err = fmt.Errorf("the gpubpf agent of process %d does not say when its launch events began (protocol 7)", pid)
	}
	if err != nil {
		f.close()
		fail(err.Error())
		return
	}
	d.lock()
	s.attached(at)
	d.unlock()
	// The mappings now, while the process surely runs (libcuda is mapped,
	// so cudart is too): a record's call site tells a runtime launch from
	// a driver one, and a program that exits within the grace below would
	// leave them unreadable (seen on the H100: alloc_mix's launches, all
	// made then, reported as cuLaunchKernel).
	d.prime()
	// Read from now on (the ring holds 64 Ki launches), delivered once
	// the probes are gone and their events read.
	f.sw = s
	d.addFeed(f)
	// The probes stay a little longer (see switchGrace); at the end of the
	// trace they go at once, the agent having the launches from attachNs on.
	select {
	case <-stop:
	case <-time.After(time.Duration(at + uint64(switchGrace) - min(at+uint64(switchGrace), agentproto.MonoNow()))):
	}
	until := agentproto.MonoNow()
	closed := d.att.SwitchLaunchesToAgent(pid)
	orphans := orphanLaunches(d.inflight, pid)
	detach := agentproto.MonoNow()
	hits := d.hits()
	d.prime()
	d.lock()
	s.probesUntil, s.detachNs, s.detached = until, detach, true
	s.hitsBefore = hits
	for i := range orphans {
		s.orphans++
		if s.probed(&orphans[i]) {
			d.handle(&orphans[i])
		}
	}
	d.unlock()
	d.logf("process %d: launches from its gpubpf agent from now on (%d launch probe links detached, %d launches in flight taken from their entry)",
		pid, closed, len(orphans))
}

// mapsCUDADriver says whether process pid has mapped libcuda.
func mapsCUDADriver(pid int) bool {
	ms, err := procmaps.Read(pid)
	return err == nil && len(ms.Matching(isCuda)) > 0
}

// orphanLaunches takes out of the in-flight table the launches of process
// pid whose return the detached links would have taken: left there, each
// would fold every later traced call of its thread away as nested. They
// are returned as launches reported from their entry (no result), as the
// BPF side would have reported them, for the switch to decide on.
func orphanLaunches(m *ebpf.Map, pid int) []Event {
	var (
		key  uint64
		val  gpueventsnoopInflight
		keys []uint64
		vals []gpueventsnoopInflight
	)
	it := m.Iterate()
	for it.Next(&key, &val) {
		if int(key>>32) == pid && val.Cookie&cLaunch != 0 {
			keys = append(keys, key)
			vals = append(vals, val)
		}
	}
	var out []Event
	for i, k := range keys {
		if m.Delete(k) != nil {
			continue // its return came after all
		}
		var ev Event
		if err := Decode(inflightRecord(pid, k, &vals[i]), &ev); err == nil {
			out = append(out, ev)
		}
	}
	return out
}

// inflightRecord builds the ring-buffer record the BPF side would have
// emitted at the entry of an in-flight call.
func inflightRecord(pid int, key uint64, in *gpueventsnoopInflight) []byte {
	b := make([]byte, eventSize)
	le := binary.LittleEndian
	le.PutUint64(b[offTs:], in.Ts)
	le.PutUint32(b[offPid:], uint32(pid))
	le.PutUint32(b[offTid:], uint32(key))
	le.PutUint32(b[offCookie:], uint32(in.Cookie)|cEntryOnly)
	for i, r := range in.Regs {
		le.PutUint64(b[offRegs+8*i:], r)
	}
	for i, w := range in.Stk {
		le.PutUint64(b[offStk+8*i:], w)
	}
	if in.Cookie&cLaunchConfig != 0 {
		// The thread is still in the call: its launch configuration is
		// where the first argument points.
		if f, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid)); err == nil {
			f.ReadAt(b[offCfg:offCfg+40], int64(in.Regs[0]))
			f.Close()
		}
	}
	comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/comm", pid, uint32(key)))
	copy(b[offComm:offComm+15], strings.TrimSpace(string(comm)))
	le.PutUint64(b[offCaller2:], in.Caller2)
	le.PutUint64(b[offIP:], in.Ip)
	return b
}
