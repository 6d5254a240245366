package runtime

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"time"

	"github.com/gpubpf/gpubpf/pkg/runtime/agentproto"
	"github.com/gpubpf/gpubpf/pkg/runtime/graphs"
)

// KernelTime is one kernel execution in a traced process, from CUPTI's
// activity records (Options.KernelTimes): every kernel, with PTX or not.
type KernelTime struct {
	PID    int
	Device int
	Ctx    uint64 // 0: the device's primary context (as MapCopy.Ctx)
	Kernel string // mangled, as CUPTI names it
	// CPU: CLOCK_MONOTONIC ns of the launch call as it reached the driver
	// (a graph's kernels: the graph launch); 0 when the agent had no stamp
	// for it.
	CPU uint64
	// Start, End: the kernel's GPU start and end on CLOCK_MONOTONIC, as
	// CUPTI converts them.
	Start, End uint64
	Grid       uint64 // %gridid (unique per launch in its context)
	Stream     uint64 // the CUstream the launch named
	// StreamUnknown: Stream (and Ctx) are not known: the CPU time came
	// from CUPTI's record of the launch call, which names neither.
	StreamUnknown bool
	Graph         uint32 // CUDA graph id, 0 when not launched by a graph
}

// kernelTimes is a process's side of Options.KernelTimes.
type kernelTimes struct {
	tried   bool // started, or tried to
	on      bool
	names   map[uint32]string
	pending []KernelTime // read at a last look, not taken yet
}

// startKernelTimes turns CUPTI's kernel records on in p (Options.KernelTimes);
// a process where it cannot is recorded with the agent's reason.
func (p *Process) startKernelTimes() {
	p.mu.Lock()
	tried := p.kt.tried
	p.kt.tried = true
	p.mu.Unlock()
	if tried || p.conn == nil {
		return
	}
	lib, ver, err := p.conn.KernelTimesStart()
	if err == nil {
		p.mu.Lock()
		p.kt.on, p.kt.names = true, map[uint32]string{}
		p.mu.Unlock()
		p.s.logf("process %d: kernel times from %s, CUPTI version %d", p.PID, lib, ver)
	} else {
		p.s.warnf("process %d: kernels without PTX are not timed: %v", p.PID, err)
	}
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	st := &p.s.stats
	if err != nil {
		if st.KernelTimesOff == nil {
			st.KernelTimesOff = map[int]string{}
		}
		st.KernelTimesOff[p.PID] = err.Error()
		return
	}
	if p.running && !p.attached.IsZero() {
		// a program started under the tool has CUPTI on before its first
		// CUDA call; one attached to had launches meanwhile
		if st.KernelTimesLate == nil {
			st.KernelTimesLate = map[int]time.Duration{}
		}
		st.KernelTimesLate[p.PID] = time.Since(p.attached)
	}
	if st.KernelTimesFrom == nil {
		st.KernelTimesFrom = map[int]string{}
	}
	st.KernelTimesFrom[p.PID] = fmt.Sprintf("%s (CUPTI %d)", lib, ver)
}

// kernelTimesOn reports whether CUPTI's records are on in p.
func (p *Process) kernelTimesOn() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.kt.on
}

// needKernelTimes: p has a kernel no probe can time (KernelTimesWhenNeeded
// starts CUPTI's records now, before the held module's first launch).
func (p *Process) needKernelTimes() {
	if p.s.opts.KernelTimes == KernelTimesWhenNeeded {
		p.startKernelTimes()
	}
}

// readKernelTimes takes p's records since the last read (final: CUPTI's
// buffers not full yet too) into p.kt.pending.
func (p *Process) readKernelTimes(final bool) error {
	p.mu.Lock()
	on := p.kt.on
	p.mu.Unlock()
	if !on || p.conn == nil {
		return nil
	}
	rep, err := p.conn.KernelTimes(final)
	if err != nil {
		return p.readFailed(err, "kernel times")
	}
	p.mu.Lock()
	for _, n := range rep.Names {
		p.kt.names[n.ID] = n.Name
	}
	for _, r := range rep.Records {
		p.kt.pending = append(p.kt.pending, KernelTime{PID: p.PID, Device: int(r.Device), Ctx: r.Ctx,
			Kernel: p.kt.names[r.Name], CPU: r.CPU, Start: r.Start, End: r.End, Grid: r.Grid, Stream: r.Stream,
			StreamUnknown: r.Flags&agentproto.KernelTimeStreamUnknown != 0,
			Graph:         r.Graph})
	}
	p.mu.Unlock()
	p.s.mu.Lock()
	st := &p.s.stats
	st.KernelTimesDropped += rep.CUPTIDropped + rep.Dropped
	if st.KernelTimesRecords == nil {
		st.KernelTimesRecords = map[int]uint64{}
	}
	st.KernelTimesRecords[p.PID] += uint64(len(rep.Records))
	if rep.Library != "" { // the read's account (agents before it send none)
		if st.KernelTimesCUPTI == nil {
			st.KernelTimesCUPTI = map[int]string{}
		}
		st.KernelTimesCUPTI[p.PID] = rep.Library
	}
	p.s.mu.Unlock()
	return nil
}

// KernelTimes returns the kernel executions recorded since the last call in
// every traced process (Options.KernelTimes), each process's in the order
// CUPTI completed them; final also takes what CUPTI still buffers (the
// trace ends). A process that has exited gave its last records at its last
// look.
func (s *Session) KernelTimes(final bool) ([]KernelTime, error) {
	var out []KernelTime
	var errs []error
	s.mu.Lock()
	procs := s.everyProcessLocked()
	s.mu.Unlock()
	sort.Slice(procs, func(i, j int) bool { return procs[i].PID < procs[j].PID })
	for _, p := range procs {
		if err := p.readKernelTimes(final); err != nil {
			errs = append(errs, err)
		}
		p.mu.Lock()
		out = append(out, p.kt.pending...)
		p.kt.pending = nil
		p.mu.Unlock()
	}
	return out, errors.Join(errs...)
}

// Instrumented reports whether kernel (a mangled name) has a probe in some
// process of the session: its launches are timed by the probe, and a tool
// that has CUPTI's records too takes only their durations.
func (s *Session) Instrumented(kernel string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats.KernelsMatched[kernel]
}

// readFailed is a failed read of what from p's agent as the tool sees it:
// nothing when the process has gone (its last look took the rest).
func (p *Process) readFailed(err error, what string) error {
	select {
	case <-p.conn.Done():
		return nil
	default:
	}
	if errors.Is(err, os.ErrClosed) {
		return nil
	}
	return fmt.Errorf("process %d: reading %s: %w", p.PID, what, err)
}

// readGraphStamps takes p's graph launch stamps new since the last read
// (agentproto.GraphStamps).
func (p *Process) readGraphStamps() error {
	if p.conn == nil {
		return nil
	}
	rep, err := p.conn.GraphStamps()
	if err != nil {
		return p.readFailed(err, "graph launch stamps")
	}
	p.mu.Lock()
	if p.stamps == nil {
		p.stamps = graphs.NewStamps()
	}
	p.stamps.Add(rep)
	p.mu.Unlock()
	return nil
}

// ReadGraphStamps takes every traced process's graph launch stamps new
// since the last call: the stamps of the graph launches that ran kernel
// nodes the agent swapped into executable graphs made before the probes
// (their probes record a node id and run index, launch word kind
// agentproto.LaunchKindGraphSeq, instead of a stamp). Call it after reading
// the runs and before GraphLaunchStamp: a run's launch was stamped before
// the run began. A process that has exited gave its last at its last look.
func (s *Session) ReadGraphStamps() error {
	s.mu.Lock()
	procs := s.everyProcessLocked()
	s.mu.Unlock()
	var errs []error
	for _, p := range procs {
		if err := p.readGraphStamps(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// GraphLaunchStamps returns the lookup of process pid's graph launch
// stamps: the CLOCK_MONOTONIC stamp of the graph launch that ran run idx of
// its swapped kernel node id (graphs.Stamps.Stamp); nil when pid is not
// one of the session's.
func (s *Session) GraphLaunchStamps(pid int) func(id uint32, idx uint64) (uint64, bool) {
	s.mu.Lock()
	procs := s.everyProcessLocked()
	s.mu.Unlock()
	for _, p := range procs {
		if p.PID == pid {
			return func(id uint32, idx uint64) (uint64, bool) {
				p.mu.Lock()
				defer p.mu.Unlock()
				if p.stamps == nil {
					return 0, false
				}
				return p.stamps.Stamp(id, idx)
			}
		}
	}
	return nil
}
