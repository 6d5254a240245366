package gpuevent_snoop

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/gpubpf/gpubpf/pkg/runtime/agentclient"
	"github.com/gpubpf/gpubpf/pkg/runtime/launchev"
)

// agentFeed takes a process's kernel launches from the gpubpf agent loaded
// in it (launch events, docs/agent-protocol.md) instead of uprobes: the
// launching thread writes each launch, with its result and duration, into a
// ring shared with this tool, so a launch costs no trap at all. Everything
// else (allocations, copies, graph launches, the kernel-handle lookups that
// name launches) stays on uprobes.
type agentFeed struct {
	pid  int
	conn *agentclient.Conn
	ring *launchev.Ring
	comm []byte

	names    map[uint64]string // kernel handles the agent named ("": it could not)
	taught   map[uint64]bool   // handles whose names the resolver has
	askedAt  time.Time
	unknown  bool // a handle in recs the names do not have
	recs     []launchev.Record
	Launches uint64

	// sw is set for a command whose launches were probed until the agent
	// took over (agentswitch.go): its records wait in recs until every
	// launch the probes saw has been handled (sw.ready), and those the
	// probes already reported are left out.
	sw *launchSwitch
}

// agentFeedRecords sizes the ring: 64 Ki launches (6 MiB) between reads
// every agentFeedPoll is more than 3 M launches a second.
const (
	agentFeedRecords = 1 << 16
	agentFeedPoll    = 10 * time.Millisecond
)

// openAgentFeed subscribes to process pid's launches if a gpubpf agent runs
// in it; nil, nil when none does (the caller probes as usual).
func openAgentFeed(pid int) (*agentFeed, error) {
	if _, err := os.Stat(agentclient.SocketPath(pid)); err != nil {
		return nil, nil
	}
	f, err := dialAgentFeed(pid)
	if err != nil {
		var none *agentclient.NoAgentError
		if errors.As(err, &none) {
			// A socket left behind by an earlier process with this PID
			// (an agent killed before it could remove it).
			return nil, nil
		}
		return nil, err
	}
	if _, err := f.subscribe(); err != nil {
		f.close()
		return nil, err
	}
	return f, nil
}

// dialAgentFeed connects to the agent of process pid and makes the ring,
// without asking for launch events yet (subscribe).
func dialAgentFeed(pid int) (*agentFeed, error) {
	conn, err := agentclient.DialWith(pid, agentclient.Options{Client: "gpuevent_snoop", Timeout: 2 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("the gpubpf agent of process %d: %w", pid, err)
	}
	ring, err := launchev.New(agentFeedRecords)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("a launch-event ring for process %d: %w", pid, err)
	}
	comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return &agentFeed{pid: pid, conn: conn, ring: ring, comm: []byte(strings.TrimSpace(string(comm))),
		names: map[uint64]string{}, taught: map[uint64]bool{}}, nil
}

// subscribe asks the agent for the launch events; it returns when the
// agent turned them on (its CLOCK_MONOTONIC).
func (f *agentFeed) subscribe() (uint64, error) {
	at, err := f.conn.LaunchEvents(f.ring.File(), f.ring.Size())
	if err != nil {
		return 0, fmt.Errorf("the gpubpf agent of process %d: %w", f.pid, err)
	}
	return at, nil
}

// drain moves what the ring holds into recs (no lock: only this feed reads
// it).
func (f *agentFeed) drain() {
	f.ring.Read(func(r *launchev.Record) {
		f.recs = append(f.recs, *r)
		if _, ok := f.names[r.Func]; !ok {
			f.unknown = true
		}
	})
}

// collect drains the ring and, when a launched handle is new, asks the
// agent for the kernels' names (at most every 100 ms; the agent knows every
// kernel the program launches). Records not delivered yet (a switch not
// ready) stay in recs.
func (f *agentFeed) collect() {
	f.drain()
	if !f.unknown || time.Since(f.askedAt) < 100*time.Millisecond {
		return
	}
	f.askedAt = time.Now()
	inv, err := f.conn.Inventory(false)
	if err != nil {
		return
	}
	for _, k := range inv.Kernels {
		if k.Name != "" {
			f.names[k.Handle] = k.Name
		}
	}
	for _, r := range f.recs { // asked once: a handle the agent cannot name stays unnamed
		if _, ok := f.names[r.Func]; !ok {
			f.names[r.Func] = ""
		}
	}
	f.unknown = false
}

// deliver hands the collected launches to the tracer (its lock held):
// each as the runtime launch that made it when cudart called the driver,
// else as the driver launch itself. With a switch not ready yet (and not
// final) it keeps them for later; final, it leaves none.
func (f *agentFeed) deliver(tr *Tracer, res *Resolver, final bool) {
	if f.sw != nil && !final && !f.sw.ready() {
		return
	}
	var ev Event
	for len(f.recs) > 0 {
		n := len(f.recs)
		for i := 0; i < n; i++ {
			r := &f.recs[i]
			// Once per handle: a lookup resets the resolver's cached name.
			if name := f.names[r.Func]; name != "" && !f.taught[r.Func] {
				res.AddLookup(&Lookup{PID: uint32(f.pid), Handle: r.Func, Name: name})
				f.taught[r.Func] = true
			}
			f.event(r, res, &ev)
			if f.sw == nil || f.sw.fed(&ev) { // else the probes reported it
				tr.Handle(&ev)
				f.Launches++
			}
			// A long batch (the launches held back at a switch) must
			// not leave the ring unread until it is done: it fills in
			// 64 Ki launches.
			if i%4096 == 4095 {
				f.drain()
			}
		}
		f.recs = f.recs[:copy(f.recs, f.recs[n:])]
		tr.Flush()
		if !final {
			break
		}
	}
}

func (f *agentFeed) event(r *launchev.Record, res *Resolver, ev *Event) {
	*ev = Event{
		TS: r.TS, Dur: uint64(r.Dur), PID: uint32(f.pid), TID: r.TID, Ret: r.Result,
		Stream: r.Stream, Func: r.Func, Grid: r.Grid, Block: r.Block, Shmem: uint64(r.Shmem), Caller: r.Caller,
	}
	ev.CommLen = copy(ev.comm[:], f.comm)
	drv, rt := launchAPIs(r.API)
	ev.APIID = uint8(drv)
	ev.API = &apis[drv]
	if isCudartInternal(res.Site(ev, r.Caller)) {
		ev.APIID = uint8(rt)
		ev.API = &apis[rt]
	}
}

// launchAPIs maps an agent launch record's entry point to the driver API
// and the runtime API that calls it.
func launchAPIs(a launchev.API) (drv, rt int) {
	switch a {
	case launchev.LaunchKernelPTSZ:
		return apiByName["cuLaunchKernel_ptsz"], apiByName["cudaLaunchKernel_ptsz"]
	case launchev.LaunchKernelEx:
		return apiByName["cuLaunchKernelEx"], apiByName["cudaLaunchKernelExC"]
	case launchev.LaunchKernelExPTSZ:
		return apiByName["cuLaunchKernelEx_ptsz"], apiByName["cudaLaunchKernelExC_ptsz"]
	case launchev.LaunchCooperativeKernel, launchev.LaunchCooperativeKernelPTSZ:
		return apiByName["cuLaunchKernel"], apiByName["cudaLaunchCooperativeKernel"]
	}
	return apiByName["cuLaunchKernel"], apiByName["cudaLaunchKernel"]
}

var apiByName = func() map[string]int {
	m := map[string]int{}
	for i := range apis {
		m[apis[i].Name] = i
	}
	return m
}()

// close ends the connection, and with it the agent's side of the feed.
func (f *agentFeed) close() {
	f.conn.Close()
	f.ring.Close()
}
