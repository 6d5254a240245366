package agentclient

import (
	"fmt"
	"os"
	"time"

	"github.com/gpubpf/gpubpf/pkg/runtime/agentproto"
)

// Target re-exports agentproto.Target: Device's primary context, or Ctx
// when non-zero.
type Target = agentproto.Target

// OnDevice is the primary context of device ordinal dev.
func OnDevice(dev int) Target { return Target{Device: int32(dev)} }

// InContext is the context ctx (a handle from List).
func InContext(ctx uint64) Target { return Target{Ctx: ctx} }

// Inventory lists modules and kernels. With enumerate, the agent also asks
// the driver for kernels the application has not looked up yet (lazy
// loading) and for missing names.
func (c *Conn) Inventory(enumerate bool) (*agentproto.Inventory, error) {
	var flags uint32
	if !enumerate {
		flags = agentproto.ListNoEnumerate
	}
	inv := &agentproto.Inventory{}
	if err := c.call(agentproto.OpList, &agentproto.ListRequest{Flags: flags}, inv, nil); err != nil {
		return nil, err
	}
	return inv, nil
}

// FetchImage returns a module's image (fatbin, cubin or PTX) in full.
func (c *Conn) FetchImage(moduleID uint64) ([]byte, error) {
	const chunk = 8 << 20
	var out []byte
	for {
		var r agentproto.FetchReply
		err := c.call(agentproto.OpFetch, &agentproto.FetchRequest{ModuleID: moduleID, Offset: uint64(len(out)), Max: chunk}, &r, nil)
		if err != nil {
			return nil, err
		}
		if out == nil && r.Total <= 1<<34 {
			out = make([]byte, 0, r.Total)
		}
		out = append(out, r.Data...)
		if uint64(len(out)) >= r.Total {
			return out, nil
		}
		if len(r.Data) == 0 {
			return nil, fmt.Errorf("agent fetch: module %d image stopped at %d of %d bytes", moduleID, len(out), r.Total)
		}
	}
}

// Globals returns the device addresses of a module's globals by name
// (__device__ and __constant__ variables), in t's context. A global that
// does not exist has CUResult != 0.
func (c *Conn) Globals(moduleID uint64, t Target, names ...string) ([]agentproto.Global, error) {
	var r agentproto.GlobalsReply
	if err := c.call(agentproto.OpGlobals, &agentproto.GlobalsRequest{ModuleID: moduleID, Target: t, Names: names}, &r, nil); err != nil {
		return nil, err
	}
	return r.Globals, nil
}

// LoadPTX loads an instrumented module with the driver JIT in t's context
// and resolves functions. A JIT failure comes back as *agentproto.Error
// whose Message holds the JIT error log.
func (c *Conn) LoadPTX(t Target, ptx []byte, functions ...string) (*agentproto.LoadReply, error) {
	r := &agentproto.LoadReply{}
	if err := c.call(agentproto.OpLoad, &agentproto.LoadRequest{Target: t, PTX: ptx, Functions: functions}, r, nil); err != nil {
		return nil, err
	}
	return r, nil
}

// Unload deactivates the clone's probes and unloads it once its launches
// have finished.
func (c *Conn) Unload(cloneID uint64) error {
	return c.call(agentproto.OpUnload, &agentproto.IDRequest{ID: cloneID}, nil, nil)
}

// Alloc allocates size bytes of zeroed device memory, freed at detach.
func (c *Conn) Alloc(t Target, size uint64) (uint64, error) {
	var r agentproto.AddrReply
	if err := c.call(agentproto.OpAlloc, &agentproto.AllocRequest{Target: t, Size: size}, &r, nil); err != nil {
		return 0, err
	}
	return r.Addr, nil
}

// Free frees memory from Alloc (after launches that may use it finish).
func (c *Conn) Free(t Target, addr uint64) error {
	return c.call(agentproto.OpFree, &agentproto.FreeRequest{Target: t, Addr: addr}, nil, nil)
}

// Memset sets size bytes at addr to value.
func (c *Conn) Memset(t Target, addr uint64, value byte, size uint64) error {
	return c.call(agentproto.OpMemset, &agentproto.MemsetRequest{Target: t, Addr: addr, Value: uint32(value), Size: size}, nil, nil)
}

// Write copies data to device memory at addr.
func (c *Conn) Write(t Target, addr uint64, data []byte) error {
	return c.call(agentproto.OpWrite, &agentproto.WriteRequest{Target: t, Addr: addr, Data: data}, nil, nil)
}

// Read copies size bytes (at most 16 MiB) of device memory at addr.
func (c *Conn) Read(t Target, addr uint64, size uint32) ([]byte, error) {
	var r agentproto.DataReply
	if err := c.call(agentproto.OpRead, &agentproto.ReadRequest{Target: t, Addr: addr, Size: size}, &r, nil); err != nil {
		return nil, err
	}
	return r.Data, nil
}

// RegisterMemfd shares a memfd (or any mmappable file) with the process:
// the agent maps size bytes at offset and registers them for device
// access. The caller keeps its own fd.
func (c *Conn) RegisterMemfd(t Target, f *os.File, size, offset uint64) (*agentproto.RegisterHostReply, error) {
	return c.registerHost(t, agentproto.HostMemfd, int(f.Fd()), size, offset)
}

// RegisterBPFMap shares a BPF_F_MMAPABLE array map (its fd) with the GPU;
// size is the map's mmap size (value size x entries, page rounded).
func (c *Conn) RegisterBPFMap(t Target, mapFD int, size uint64) (*agentproto.RegisterHostReply, error) {
	return c.registerHost(t, agentproto.HostBPFMap, mapFD, size, 0)
}

func (c *Conn) registerHost(t Target, kind uint32, fd int, size, offset uint64) (*agentproto.RegisterHostReply, error) {
	r := &agentproto.RegisterHostReply{}
	err := c.call(agentproto.OpRegisterHost, &agentproto.RegisterHostRequest{Target: t, Kind: kind, Size: size, Offset: offset}, r, []int{fd})
	if err != nil {
		return nil, err
	}
	return r, nil
}

// UnregisterHost undoes RegisterMemfd/RegisterBPFMap.
func (c *Conn) UnregisterHost(regionID uint64) error {
	return c.call(agentproto.OpUnregisterHost, &agentproto.IDRequest{ID: regionID}, nil, nil)
}

// Snapshot copies size bytes of device memory at src into a registered
// host region at regionOffset (synchronously), after the session's
// instrumented launches issued so far; flags agentproto.SnapshotLive:
// without waiting for them.
func (c *Conn) Snapshot(t Target, src, regionID, regionOffset, size uint64, flags uint32) error {
	return c.call(agentproto.OpSnapshot, &agentproto.SnapshotRequest{Target: t, Src: src, RegionID: regionID, RegionOffset: regionOffset, Size: size, Flags: flags}, nil, nil)
}

// RingDrain drains a GPU event ring into its host mirror in one round
// trip, in t's context on the session's stream (it does not wait for the
// application's launches): it publishes each shard's r.Release where it
// moved, copies the control blocks to region offset 0 and, without
// agentproto.RingDrainHostData, each shard's new data (agentproto's
// RingDrainRequest). r.Target is set to t.
func (c *Conn) RingDrain(t Target, r agentproto.RingDrainRequest) (agentproto.RingDrainReply, error) {
	r.Target = t
	var rep agentproto.RingDrainReply
	err := c.call(agentproto.OpRingDrain, &r, &rep, nil)
	return rep, err
}

// Activate makes launches of kernel (a CUkernel or CUfunction handle from
// Inventory) in the clone's context run function (from LoadPTX) instead.
func (c *Conn) Activate(kernel, cloneID, function uint64) error {
	return c.ActivateWith(kernel, cloneID, function, agentproto.LaunchWords{})
}

// ActivateWith is Activate for a function that takes hidden launch words
// (lw.Hidden = agentproto.LaunchHiddenWords): the agent appends a CPU
// timestamp and the launch's stream to its arguments at every launch (see
// agentproto.LaunchWords). The zero LaunchWords is plain Activate.
func (c *Conn) ActivateWith(kernel, cloneID, function uint64, lw agentproto.LaunchWords) error {
	return c.call(agentproto.OpActivate, &agentproto.ActivateRequest{Kernel: kernel, CloneID: cloneID, Function: function, LaunchWords: lw}, nil, nil)
}

// Clock measures the offset of the GPU's %globaltimer from
// CLOCK_MONOTONIC in t's context with rounds (1 to
// agentproto.ClockMaxRounds) round trips to a one-thread kernel, keeping
// the shortest. A GPU too busy to start the kernel within a second gives an
// error; a later call may succeed.
func (c *Conn) Clock(t Target, rounds int) (agentproto.ClockReply, error) {
	if rounds < 1 || rounds > agentproto.ClockMaxRounds {
		return agentproto.ClockReply{}, fmt.Errorf("agent clock: %d rounds; ask for 1 to %d", rounds, agentproto.ClockMaxRounds)
	}
	var r agentproto.ClockReply
	if err := c.call(agentproto.OpClock, &agentproto.ClockRequest{Target: t, Rounds: uint32(rounds)}, &r, nil); err != nil {
		return agentproto.ClockReply{}, err
	}
	return r, nil
}

// Launch runs r.Function (loaded by this session with LoadPTX in r.Target's
// context) once as a kernel of its own and waits for it (see
// agentproto.LaunchRequest). Only an agent in direct mode launches
// (Info().Direct); an agent preloaded into an application refuses with
// agentproto.StatusUnsupported. The answer may take r.TimeoutMs and then
// CallTimeout more.
func (c *Conn) Launch(r agentproto.LaunchRequest) (agentproto.LaunchReply, error) {
	ms := r.TimeoutMs
	if ms == 0 {
		ms = agentproto.LaunchDefaultTimeoutMs
	}
	if ms > agentproto.LaunchMaxTimeoutMs {
		return agentproto.LaunchReply{}, fmt.Errorf("agent launch: timeout %d ms; at most %d", ms, agentproto.LaunchMaxTimeoutMs)
	}
	var rep agentproto.LaunchReply
	err := c.callWithin(agentproto.OpLaunch, &r, &rep, nil, time.Duration(ms)*time.Millisecond+c.timeoutFor(agentproto.OpLaunch))
	return rep, err
}

// Deactivate restores kernel's original (0: every kernel of this
// session) and returns how many probes were removed.
func (c *Conn) Deactivate(kernel uint64) (int, error) {
	var r agentproto.CountReply
	if err := c.call(agentproto.OpDeactivate, &agentproto.IDRequest{ID: kernel}, &r, nil); err != nil {
		return 0, err
	}
	return int(r.Count), nil
}

// Detach restores every kernel, unloads clones once their launches have
// finished, and frees this session's memory; the session stays open.
func (c *Conn) Detach() error { return c.call(agentproto.OpDetach, nil, nil, nil) }

// Stats returns this session's probes with their launch counts.
func (c *Conn) Stats() ([]agentproto.ProbeStat, error) {
	var r agentproto.Stats
	if err := c.call(agentproto.OpStats, nil, &r, nil); err != nil {
		return nil, err
	}
	return r.Probes, nil
}

// Graphs returns every executable graph the application launched while a
// tool was attached, with the agent's counts so far (see
// agentproto.GraphExec).
func (c *Conn) Graphs() ([]agentproto.GraphExec, error) {
	var r agentproto.Graphs
	if err := c.call(agentproto.OpGraphs, nil, &r, nil); err != nil {
		return nil, err
	}
	return r.Execs, nil
}

// GraphStamps returns the graph launch numbers new since the last call
// (agentproto.GraphStamps): the ids this session's swapped kernel nodes
// took, and the stamps of their execs' launches not read yet.
func (c *Conn) GraphStamps() (agentproto.GraphStamps, error) {
	var r agentproto.GraphStamps
	err := c.call(agentproto.OpGraphStamps, nil, &r, nil)
	return r, err
}

// Continue lets a module load held for this session (Options.Hold) return
// to the application; ids up to moduleID are released.
func (c *Conn) Continue(moduleID uint64) error {
	return c.call(agentproto.OpContinue, &agentproto.IDRequest{ID: moduleID}, nil, nil)
}

// ReleaseUnload lets the application go on unloading module id, after the
// tool took its last look at its maps (see Notification.Unloading).
func (c *Conn) ReleaseUnload(id uint64) error {
	return c.call(agentproto.OpReleaseUnload, &agentproto.IDRequest{ID: id}, nil, nil)
}

// DeviceReady tells the agent the tool has set up what it needs on a device
// the application started using (see Notification.DeviceUsed).
func (c *Conn) DeviceReady(ordinal int32) error {
	return c.call(agentproto.OpDeviceReady, &agentproto.DeviceRequest{Ordinal: uint32(ordinal)}, nil, nil)
}

// LaunchEvents hands the agent a launch-event ring (launchev.Ring's memfd
// and size): from now on every kernel launch of the program through the
// agent is a record there. One tool per process; closing the connection
// stops it too. attachNs is the agent's CLOCK_MONOTONIC when the events
// came on: every launch whose wrapper started then or later is in the
// ring (0: an agent before protocol 7 did not say).
func (c *Conn) LaunchEvents(f *os.File, size uint64) (attachNs uint64, err error) {
	var rep agentproto.LaunchEventsReply
	if err := c.call(agentproto.OpLaunchEvents, &agentproto.LaunchEventsRequest{Size: size}, &rep, []int{int(f.Fd())}); err != nil {
		return 0, err
	}
	return rep.AttachNs, nil
}

// StopLaunchEvents ends LaunchEvents: the agent unmaps the ring.
func (c *Conn) StopLaunchEvents() error {
	return c.call(agentproto.OpLaunchEvents, &agentproto.LaunchEventsRequest{}, nil, nil)
}

// KernelTimesStart turns CUPTI's kernel records on in the process (see
// agentproto.KernelTimesStart); it returns the libcupti the agent loaded
// and CUPTI's version. An agent that cannot (no libcupti, CUPTI held by a
// profiler) answers an error that says why.
func (c *Conn) KernelTimesStart() (lib string, version uint32, err error) {
	var rep agentproto.KernelTimesReply
	if err := c.call(agentproto.OpKernelTimes, &agentproto.KernelTimesRequest{Action: agentproto.KernelTimesStart}, &rep, nil); err != nil {
		return "", 0, err
	}
	return rep.Library, rep.Version, nil
}

// KernelTimes returns the kernel records completed since the last call;
// final also flushes the ones CUPTI still buffers (the process is exiting).
func (c *Conn) KernelTimes(final bool) (*agentproto.KernelTimesReply, error) {
	req := &agentproto.KernelTimesRequest{Action: agentproto.KernelTimesRead}
	if final {
		req.Flags = agentproto.KernelTimesFinal
	}
	var rep agentproto.KernelTimesReply
	if err := c.call(agentproto.OpKernelTimes, req, &rep, nil); err != nil {
		return nil, err
	}
	return &rep, nil
}

// KernelTimesStop turns the records off and lets CUPTI go.
func (c *Conn) KernelTimesStop() error {
	return c.call(agentproto.OpKernelTimes, &agentproto.KernelTimesRequest{Action: agentproto.KernelTimesStop}, nil, nil)
}

// Sanitize selects kernels for the sanitizer path, or with
// agentproto.SanitizeAccount only reads its account (see
// agentproto.SanitizeRequest). An agent that cannot patch (not preloaded
// with GPUBPF_SANITIZER, no library) refuses a selection with its reason;
// an account request then answers Ready false and the reason.
func (c *Conn) Sanitize(req *agentproto.SanitizeRequest) (agentproto.SanitizeReply, error) {
	var r agentproto.SanitizeReply
	err := c.call(agentproto.OpSanitize, req, &r, nil)
	return r, err
}
