package runtime

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf"

	"github.com/gpubpf/gpubpf/pkg/runtime/agentclient"
	"github.com/gpubpf/gpubpf/pkg/runtime/agentlib"
	"github.com/gpubpf/gpubpf/pkg/runtime/agentproto"
	"github.com/gpubpf/gpubpf/pkg/runtime/direct"
	"github.com/gpubpf/gpubpf/pkg/runtime/gpumap"
	"github.com/gpubpf/gpubpf/pkg/runtime/launch"
	"github.com/gpubpf/gpubpf/pkg/runtime/verify"
)

// DirectOptions say how RunDirect runs a session's direct programs.
type DirectOptions struct {
	// Device is the GPU's ordinal.
	Device int
	// Grid and Block are every launch's dimensions (each at least 1).
	Grid, Block [3]uint32
	// Fill holds what goes into maps before the first program runs, by
	// map name, on top of the object's own initial contents.
	Fill map[string]MapFill
	// Timeout bounds each kernel (0: agentproto.LaunchDefaultTimeoutMs).
	Timeout time.Duration
	// Context ends the run (Ctrl-C): a kernel cannot be stopped, so the
	// host process is, and RunDirect returns ErrInterrupted.
	Context context.Context
	// Ready, when set, hears the GPU once the host is up and has it,
	// before anything is placed (a tool's start line).
	Ready func(agentproto.Device)
}

// MapFill is entries for one map: keys and values of the map's sizes, one
// after the other (for arrays, keys are u32 indexes).
type MapFill struct{ Keys, Values []byte }

// DirectRun is one program's launch.
type DirectRun struct {
	Program string
	// Entry is the kernel the program ran as.
	Entry       string
	Grid, Block [3]uint32
	// Kernel is the time between CUDA events around the kernel (Timed),
	// or the wall time where the events could not time it; Wall is the
	// launch call to the agent seeing it done.
	Kernel, Wall time.Duration
	Timed        bool
	// Batches are the trace_printk lines and ring records the kernel
	// left, drained right after it.
	Batches []*Batch
}

// DirectResult is what RunDirect did.
type DirectResult struct {
	// PID is the host process's.
	PID    int
	Device agentproto.Device
	// Driver is the driver's version (13000 = 13.0).
	Driver int32
	// Runs are the launches, in order; Maps every map the programs use,
	// read after the last one.
	Runs []DirectRun
	Maps []MapCopy
}

// ErrInterrupted is returned when DirectOptions.Context ended the run.
var ErrInterrupted = errors.New("interrupted")

// hostEnv makes the agent library the host process of a direct run.
const hostEnv = "GPUBPF_AGENT_DIRECT=1"

// DirectMaps are the maps the session's direct programs use, by name: the
// ones a direct run places, fills and reads back.
func (s *Session) DirectMaps() map[string]*ebpf.MapSpec {
	out := map[string]*ebpf.MapSpec{}
	for _, g := range s.gpu {
		for _, name := range verify.ReferencedMaps(g.Spec) {
			if m := s.spec.Maps[name]; m != nil {
				out[name] = m
			}
		}
	}
	return out
}

// RunDirect runs the session's direct programs (Options.Direct) with no
// application: it starts the agent library as a host process of its own
// (through the same gate as TOOL -- CMD), places the programs' maps on the
// device as for an application, fills them, loads the programs as kernels
// and launches each once, in order, reads every map back, detaches and
// waits for the host to exit. A result comes back with an error too when
// some programs ran.
func (s *Session) RunDirect(opts DirectOptions) (res *DirectResult, err error) {
	if !s.opts.Direct {
		return nil, errors.New("RunDirect needs a session opened with Options.Direct")
	}
	for i := range 3 {
		if opts.Grid[i] == 0 || opts.Block[i] == 0 {
			return nil, fmt.Errorf("grid (%d,%d,%d) block (%d,%d,%d): every dimension must be at least 1",
				opts.Grid[0], opts.Grid[1], opts.Grid[2], opts.Block[0], opts.Block[1], opts.Block[2])
		}
	}
	ctx := opts.Context
	if ctx == nil {
		ctx = context.Background()
	}
	start := time.Now()
	lib, err := agentlib.Path()
	if err != nil {
		return nil, err
	}
	h, err := startHost(lib)
	if err != nil {
		return nil, err
	}
	defer func() {
		if herr := h.end(); herr != nil && err == nil {
			err = herr
		}
		if err != nil && ctx.Err() != nil && !errors.Is(err, ErrInterrupted) {
			err = fmt.Errorf("%w: %v", ErrInterrupted, err)
		}
	}()
	running := make(chan struct{})
	defer close(running)
	go func() {
		select {
		case <-ctx.Done():
			h.kill() // a kernel cannot be stopped but with its process
		case <-running:
		}
	}()
	conn, err := dialAgent(ctx, h.pid, agentclient.Options{Client: s.opts.Client}, agentWait)
	if err != nil {
		return nil, fmt.Errorf("the direct-run host process (%s, PID %d) did not answer: %w", lib, h.pid, err)
	}
	info := conn.Info()
	if !info.Direct {
		conn.Close()
		return nil, fmt.Errorf("%s did not start as a direct-run host (an agent library of another gpubpf version?): use the one that came with this tool (gpubpf agent-path)", lib)
	}
	if !info.CUDAReady {
		conn.Close()
		why := info.CUDAError
		if why == "" {
			why = "the CUDA driver could not be initialised"
		}
		return nil, fmt.Errorf("--direct needs a GPU: %s", why)
	}
	dev, ok := deviceOf(info, opts.Device)
	if !ok {
		conn.Close()
		return nil, fmt.Errorf("--device %d: this machine has %d GPU(s)%s; pick one of them", opts.Device, len(info.Devices), deviceList(info))
	}
	res = &DirectResult{PID: h.pid, Device: dev, Driver: info.DriverVersion}
	if opts.Ready != nil {
		opts.Ready(dev)
	}
	p := s.newProcess(h.pid, false, start)
	p.conn = conn
	p.used[dev.Ordinal] = dev
	s.mu.Lock()
	s.procs[h.pid] = p
	s.stats.Processes++
	s.mu.Unlock()
	defer s.Detach(h.pid) // the session's end ends the host
	// Per-thread arrays get a slot for every thread of the launch.
	if n := uint64(opts.Grid[0]) * uint64(opts.Grid[1]) * uint64(opts.Grid[2]) * uint64(opts.Block[0]) * uint64(opts.Block[1]) * uint64(opts.Block[2]); s.opts.Threads == 0 && n <= 1<<32-1 {
		s.opts.Threads = uint32(n)
	}
	t := agentclient.OnDevice(opts.Device)
	d, err := p.device(t)
	if err != nil {
		return res, err
	}
	for _, name := range sortedKeys(opts.Fill) {
		if err := p.fillMap(d, name, opts.Fill[name]); err != nil {
			return res, err
		}
	}
	progs := make([]direct.Program, len(s.gpu))
	for i, g := range s.gpu {
		progs[i] = direct.Program{Name: g.Spec.Name, Func: d.funcs[g.Spec.Name]}
	}
	tgt := direct.Target{Major: int(dev.Major), Minor: int(dev.Minor)}
	if isa := info.PTXISAMax; isa > 0 {
		tgt.MaxPTX = [2]int{int(isa / 10), int(isa % 10)}
	}
	mod, err := direct.Build(progs, tgt)
	if err != nil {
		return res, fmt.Errorf("GPU %d: %w", opts.Device, err)
	}
	lr, err := conn.LoadPTX(t, []byte(mod.PTX), mod.Entries...)
	if err != nil {
		return res, fmt.Errorf("the driver's JIT refused the direct programs: %w", err)
	}
	fn := map[string]uint64{}
	for _, f := range lr.Functions {
		fn[f.Name] = f.Handle
	}
	s.logf("direct: host %d, GPU %d (%s, sm_%d%d), %d program(s) loaded as %s (JIT %.1f ms)", h.pid, dev.Ordinal, dev.Name, dev.Major, dev.Minor,
		len(progs), mod.SM, float64(lr.LoadNanos)/1e6)
	var cur *DirectRun
	s.sink = func(b *Batch) { cur.Batches = append(cur.Batches, b) }
	defer func() { s.sink = nil }()
	ms := uint32(opts.Timeout / time.Millisecond)
	if opts.Timeout > 0 && ms == 0 {
		ms = 1
	}
	for i, g := range s.gpu {
		entry := mod.Entries[i]
		res.Runs = append(res.Runs, DirectRun{Program: g.Spec.Name, Entry: entry, Grid: opts.Grid, Block: opts.Block})
		cur = &res.Runs[len(res.Runs)-1]
		rep, err := conn.Launch(agentproto.LaunchRequest{Target: t, Function: fn[entry], Grid: opts.Grid, Block: opts.Block, TimeoutMs: ms})
		if err != nil {
			res.Runs = res.Runs[:len(res.Runs)-1]
			// The context is lost (a fault) or busy for good (a kernel
			// past its timeout: any copy on its stream would wait for
			// it): no last reads, no detach; the host goes.
			conn.Close()
			h.kill()
			if ctx.Err() != nil {
				return res, fmt.Errorf("%w while program %s ran: the direct-run host was ended, and with it the kernel", ErrInterrupted, g.Spec.Name)
			}
			return res, launchError(g.Spec.Name, opts.Timeout, err)
		}
		cur.Kernel, cur.Wall, cur.Timed = time.Duration(rep.KernelNanos), time.Duration(rep.WallNanos), rep.Timed
		p.drain(true)
	}
	res.Maps, err = s.ReadMaps()
	return res, err
}

// launchError says what became of a program whose launch failed.
func launchError(prog string, timeout time.Duration, err error) error {
	var ae *agentproto.Error
	if errors.As(err, &ae) && ae.Status == agentproto.StatusCUDA && ae.CUResult == agentproto.LaunchTimedOut {
		if timeout == 0 {
			timeout = agentproto.LaunchDefaultTimeoutMs * time.Millisecond
		}
		return fmt.Errorf("program %s: its kernel did not finish within %s s, so the direct-run host was ended to stop it: give it longer with -d SECONDS, or look for a loop that does not end",
			prog, strconv.FormatFloat(timeout.Seconds(), 'f', -1, 64))
	}
	if errors.As(err, &ae) {
		return fmt.Errorf("program %s: %s", prog, ae.Message+cuResultNote(ae.CUResult))
	}
	return fmt.Errorf("program %s: %w", prog, err)
}

func cuResultNote(r int32) string {
	switch r {
	case 0:
		return ""
	case 700:
		return " (CUDA_ERROR_ILLEGAL_ADDRESS: the program read or wrote memory it does not own)"
	case 701:
		return " (CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES: use fewer threads per block, --block)"
	case 1:
		return " (CUDA_ERROR_INVALID_VALUE: check --grid and --block against the GPU's limits)"
	}
	return fmt.Sprintf(" (CUresult %d)", r)
}

func deviceOf(info agentproto.Hello, ord int) (agentproto.Device, bool) {
	for _, d := range info.Devices {
		if int(d.Ordinal) == ord {
			return d, true
		}
	}
	return agentproto.Device{}, false
}

func deviceList(info agentproto.Hello) string {
	if len(info.Devices) == 0 {
		return ""
	}
	var parts []string
	for _, d := range info.Devices {
		parts = append(parts, fmt.Sprintf("%d %s", d.Ordinal, d.Name))
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// fillMap writes f into map name as it lives on d: arrays and hash maps in
// one write of the whole image (the object's initial contents, then f), a
// map shared with the kernel through the kernel.
func (p *Process) fillMap(d *device, name string, f MapFill) error {
	m := d.maps[name]
	if m == nil {
		return fmt.Errorf("map %s: no direct program that runs uses it, so it is not placed: fill the maps of the programs that run", name)
	}
	ks, vs := int(m.spec.KeySize), int(m.spec.ValueSize)
	n := 0
	if vs > 0 {
		n = len(f.Values) / vs
	}
	if len(f.Values) != n*vs || len(f.Keys) != n*ks {
		return fmt.Errorf("map %s: %d key bytes and %d value bytes are not whole entries of %d-byte keys and %d-byte values", name, len(f.Keys), len(f.Values), ks, vs)
	}
	key := func(i int) []byte { return f.Keys[i*ks : (i+1)*ks] }
	val := func(i int) []byte { return f.Values[i*vs : (i+1)*vs] }
	switch {
	case m.kmap != nil:
		for i := range n {
			if err := m.kmap.Update(key(i), val(i), ebpf.UpdateAny); err != nil {
				return fmt.Errorf("map %s: %w", name, err)
			}
		}
		return nil
	case m.place.Kind == gpumap.Array:
		stride := gpumap.Stride(m.spec.ValueSize)
		img := make([]byte, uint64(m.spec.MaxEntries)*stride)
		err := eachContent(name, m.spec, func(off uint64, v []byte) error {
			copy(img[off-gpumap.HeaderSize:], v)
			return nil
		})
		if err != nil {
			return err
		}
		for i := range n {
			k := binary.LittleEndian.Uint32(key(i))
			if ks != 4 || k >= m.spec.MaxEntries {
				return fmt.Errorf("map %s: key %d is past its %d entries", name, k, m.spec.MaxEntries)
			}
			copy(img[uint64(k)*stride:], val(i))
		}
		return p.writeDevice(d.target, m.devAddr+gpumap.HeaderSize, img)
	case m.place.Kind == gpumap.Hash:
		img := gpumap.Init(m.place)
		for i := range n {
			if err := gpumap.HashInsert(img, m.place, key(i), val(i)); err != nil {
				return fmt.Errorf("map %s: %w", name, err)
			}
		}
		return p.writeDevice(d.target, m.devAddr, img)
	}
	return fmt.Errorf("map %s is a GPU %s: only arrays and hash maps can be filled", name, m.place.Kind)
}

// writeDevice writes device memory in chunks the protocol allows.
func (p *Process) writeDevice(t agentproto.Target, addr uint64, b []byte) error {
	const chunk = 16 << 20
	for off := 0; off < len(b); off += chunk {
		end := min(off+chunk, len(b))
		if err := p.conn.Write(t, addr+uint64(off), b[off:end]); err != nil {
			return err
		}
	}
	return nil
}

// host is the direct run's host process: the agent library itself.
type host struct {
	pid    int
	cmd    *exec.Cmd
	exited chan error
}

// launchHost starts lib through the gate TOOL -- CMD uses, with no
// preload (it is the agent) and the environment that makes it the host.
func launchHost(lib string) (*exec.Cmd, error) {
	c, err := launch.Start([]string{lib}, launch.Options{Env: []string{hostEnv}})
	if err != nil {
		return nil, fmt.Errorf("starting the direct-run host process: %w", err)
	}
	if err := c.Release(); err != nil {
		c.Cmd.Process.Kill()
		c.Cmd.Wait()
		return nil, err
	}
	return c.Cmd, nil
}

func startHost(lib string) (*host, error) {
	c, err := launchHost(lib)
	if err != nil {
		return nil, err
	}
	h := &host{pid: c.Process.Pid, cmd: c, exited: make(chan error, 1)}
	go func() { h.exited <- c.Wait() }()
	return h, nil
}

// kill ends the host; its socket, which only its own exit removes, goes too.
func (h *host) kill() {
	h.cmd.Process.Kill()
	os.Remove(agentclient.SocketPath(h.pid))
}

// end waits (bounded) for the host to exit once its session is over, and
// ends it when it does not: a kernel that never finished keeps its context
// busy, and only the process's end stops it.
func (h *host) end() error {
	select {
	case err := <-h.exited:
		if code := waitCode(err); code != 0 && code != 128+9 {
			return fmt.Errorf("the direct-run host process (PID %d) exited with status %d (its messages are above)", h.pid, code)
		}
		return nil
	case <-time.After(windUpTime):
		h.kill()
		<-h.exited
		return nil
	}
}
