// Package agentclient is the Go side of the gpubpf agent's control socket:
// it finds agents, connects, runs every protocol operation as a method,
// delivers the agent's notifications and passes file descriptors.
package agentclient

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpubpf/gpubpf/pkg/runtime/agentlib"
	"github.com/gpubpf/gpubpf/pkg/runtime/agentproto"
)

// DefaultDir is where agents create their sockets (<pid>.sock). An agent
// that cannot use it (no permission) listens on the abstract socket
// "@gpubpf/<pid>" instead; Dial tries both. GPUBPF_AGENT_SOCKET_DIR
// overrides the directory for agent and client alike.
const DefaultDir = "/run/gpubpf"

// Dir is the socket directory in effect.
func Dir() string {
	if d := os.Getenv("GPUBPF_AGENT_SOCKET_DIR"); d != "" {
		return d
	}
	return DefaultDir
}

// SocketPath is the agent socket of pid in Dir().
func SocketPath(pid int) string { return filepath.Join(Dir(), strconv.Itoa(pid)+".sock") }

// abstractName is the fallback abstract socket address of pid.
func abstractName(pid int) string { return "@gpubpf/" + strconv.Itoa(pid) }

// Agent is a live agent found by List.
type Agent struct {
	PID  int
	Path string
}

// List returns the agents with a socket in dir (Dir() when empty) whose
// process is still alive, by PID. Agents on the abstract fallback socket
// are not listed (Dial them by PID).
func List(dir string) ([]Agent, error) {
	if dir == "" {
		dir = Dir()
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("cannot list gpubpf agents in %s: %w", dir, err)
	}
	var out []Agent
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".sock")
		if !ok || e.Type()&os.ModeSocket == 0 {
			continue
		}
		pid, err := strconv.Atoi(name)
		if err != nil || pid <= 0 {
			continue
		}
		if _, err := os.Stat("/proc/" + name); err != nil {
			continue // process gone: stale socket
		}
		out = append(out, Agent{PID: pid, Path: filepath.Join(dir, e.Name())})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PID < out[j].PID })
	return out, nil
}

// Options tune a connection.
type Options struct {
	// Client names the tool in the agent's debug log.
	Client string
	// Hold asks the agent to hold every module load until Continue is sent
	// for it (or the agent's timeout passes), so that the first launch of
	// a kernel can already be instrumented.
	Hold bool
	// Timeout bounds connecting and the hello exchange (default
	// HelloTimeout).
	Timeout time.Duration
	// CallTimeout, when set, bounds every request's answer instead of
	// CallTimeout and LoadTimeout (tests use it to meet a stuck agent
	// quickly).
	CallTimeout time.Duration
	// ManualDeviceReady: the tool answers each DeviceUsed notification
	// with DeviceReady itself, once it has set up on that device. Without
	// it the client answers at once, so a tool that places nothing per
	// device never holds the application.
	ManualDeviceReady bool
}

// How long the agent may take to answer. It answers from its own thread with
// a few driver calls on its own stream: milliseconds (a clone's JIT 6-10 ms, a
// ring drain well under one). An answer that takes far longer means the
// process is stopped (SIGSTOP, a debugger) or the agent is stuck in a driver
// call; the tool then gives up on that agent instead of hanging (see call).
const (
	// HelloTimeout bounds connecting and the hello exchange: the agent
	// answers hello without touching the driver.
	HelloTimeout = 5 * time.Second
	// CallTimeout bounds most requests. Reads, ring drains, frees, unloads
	// and detach are ordered after the instrumented launches in flight, so
	// it must cover a long kernel too; a stuck agent costs this once, as
	// the connection is given up at the first timeout.
	CallTimeout = 30 * time.Second
	// LoadTimeout bounds a clone's load: the driver JIT compiles the whole
	// module's PTX, which took the older C++ system 27.9 s for llama.cpp's
	// first fatbin.
	LoadTimeout = 2 * time.Minute
)

// Notification is an asynchronous message from the agent: exactly one
// field is set.
type Notification struct {
	ModuleLoaded *agentproto.Module
	ProbeFailed  *agentproto.ProbeFailed
	// Unloading is the id of a module the application is about to unload
	// (at exit: before its contexts and memory go). The agent holds the
	// application until ReleaseUnload(id) or its hold timeout.
	Unloading uint64
	// DeviceUsed: the application started using a device. The agent
	// holds it (bounded) until DeviceReady, so that the tool can place
	// its maps and clones there first.
	DeviceUsed *agentproto.Device
	// LateTables: a CUDA runtime that started after the tool came was
	// found (an injected agent's rescan); launches before then untraced.
	LateTables *agentproto.LateTables
	// Graphs: the application launched an executable graph the agent never
	// saw instantiated (made before an injected agent came): read Graphs.
	Graphs bool
}

// Conn is a session with one agent. Methods may be called from several
// goroutines. Closing it (or the tool dying) makes the agent restore the
// original kernels and free what the session set up.
type Conn struct {
	autoDeviceReady bool
	callTimeout     time.Duration // Options.CallTimeout

	pid   int
	addr  string
	uc    *net.UnixConn
	hello agentproto.Hello

	wmu  sync.Mutex
	mu   sync.Mutex
	next uint32
	wait map[uint32]chan reply
	err  error // set once the connection is dead
	// deadline, when set (SetDeadline), is when every answer must be in;
	// newDeadline is closed when it changes, for requests already waiting.
	deadline    time.Time
	newDeadline chan struct{}

	notes   chan Notification
	qmu     sync.Mutex
	qcond   *sync.Cond
	queue   []Notification
	closing bool
	done    chan struct{}
}

type reply struct {
	op  agentproto.Op
	p   []byte
	err error
}

// Dial connects to the agent in process pid.
func Dial(pid int) (*Conn, error) { return DialWith(pid, Options{}) }

// NoAgentError: the process runs, but no agent listens in it.
type NoAgentError struct {
	PID    int
	Socket string
}

func (e *NoAgentError) Error() string {
	return fmt.Sprintf("process %d has no gpubpf agent (no %s): start it with `LD_PRELOAD=%s CMD` or run the tool as `TOOL -- CMD`", e.PID, e.Socket, agentPathForAdvice())
}

// DialWith connects to the agent in process pid with options.
func DialWith(pid int, opts Options) (*Conn, error) {
	if pid <= 0 {
		return nil, fmt.Errorf("invalid process id %d", pid)
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err != nil {
		return nil, fmt.Errorf("no process %d is running", pid)
	}
	path := SocketPath(pid)
	uc, err := dial(path, opts.Timeout)
	if err != nil {
		uc2, err2 := dial(abstractName(pid), opts.Timeout)
		if err2 != nil {
			// a process in a container: its socket where it sees it
			if uc3, p3, err3 := nsDial(pid, opts.Timeout); uc3 != nil {
				uc, path, err2 = uc3, p3, nil
			} else if err3 != nil && !errors.Is(err3, syscall.ENOENT) && !errors.Is(err3, syscall.ECONNREFUSED) {
				err = err3
			}
		}
		if err2 != nil {
			switch {
			case errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM):
				return nil, fmt.Errorf("cannot connect to the gpubpf agent of process %d at %s: permission denied; run the tool as root or as the process's user: %w", pid, path, err)
			case errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED):
				return nil, &NoAgentError{PID: pid, Socket: path}
			}
			return nil, fmt.Errorf("cannot connect to the gpubpf agent of process %d at %s: %w", pid, path, err)
		}
		if uc2 != nil {
			uc, path = uc2, abstractName(pid)
		}
	}
	c, err := newConn(uc, pid, path, opts)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// DialPath connects to an agent socket by path ("@name" for an abstract
// socket).
func DialPath(path string, opts Options) (*Conn, error) {
	uc, err := dial(path, opts.Timeout)
	if err != nil {
		return nil, fmt.Errorf("cannot connect to the gpubpf agent at %s: %w", path, err)
	}
	return newConn(uc, 0, path, opts)
}

func dial(path string, timeout time.Duration) (*net.UnixConn, error) {
	if timeout <= 0 {
		timeout = HelloTimeout
	}
	d := net.Dialer{Timeout: timeout}
	c, err := d.Dial("unix", path)
	if err != nil {
		return nil, err
	}
	return c.(*net.UnixConn), nil
}

func newConn(uc *net.UnixConn, pid int, path string, opts Options) (*Conn, error) {
	c := &Conn{pid: pid, addr: path, uc: uc, wait: map[uint32]chan reply{}, notes: make(chan Notification),
		done: make(chan struct{}), autoDeviceReady: !opts.ManualDeviceReady, callTimeout: opts.CallTimeout}
	c.qcond = sync.NewCond(&c.qmu)
	go c.readLoop()
	go c.deliver()
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = HelloTimeout
	}
	var flags uint32
	if opts.Hold {
		flags |= agentproto.FlagHold
	}
	client := opts.Client
	if client == "" {
		client = filepath.Base(os.Args[0])
	}
	type res struct {
		h   agentproto.Hello
		err error
	}
	ch := make(chan res, 1)
	go func() {
		var h agentproto.Hello
		err := c.call(agentproto.OpHello, &agentproto.HelloRequest{Version: agentproto.Version, Flags: flags, Client: client}, &h, nil)
		ch <- res{h, err}
	}()
	var r res
	select {
	case r = <-ch:
	case <-time.After(timeout):
		r.err = fmt.Errorf("no answer within %v (is the process stopped?)", timeout)
	}
	if r.err != nil {
		c.Close()
		who := "the gpubpf agent at " + path
		if pid > 0 {
			who = fmt.Sprintf("the gpubpf agent of process %d", pid)
		}
		if errors.Is(r.err, io.EOF) || errors.Is(r.err, io.ErrUnexpectedEOF) || errors.Is(r.err, syscall.ECONNRESET) || errors.Is(r.err, syscall.EPIPE) {
			return nil, fmt.Errorf("%s closed the connection: only root or the process's own user may attach (the agent logs refusals on the process's stderr): %w", who, r.err)
		}
		return nil, fmt.Errorf("hello to %s failed: %w", who, r.err)
	}
	if r.h.Version != agentproto.Version {
		c.Close()
		return nil, fmt.Errorf("the gpubpf agent of process %d speaks protocol %d, this tool speaks %d: use the agent library that came with this tool", r.h.PID, r.h.Version, agentproto.Version)
	}
	c.hello = r.h
	if c.pid == 0 {
		c.pid = int(r.h.PID)
	}
	return c, nil
}

// Info is what the agent said in hello.
func (c *Conn) Info() agentproto.Hello { return c.hello }

// PID of the agent's process.
func (c *Conn) PID() int { return c.pid }

// Notifications delivers module-loaded and probe-failed messages in
// order; it is closed when the connection ends. Nothing is dropped: they
// queue until read.
func (c *Conn) Notifications() <-chan Notification { return c.notes }

// Done is closed when the connection has ended.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Close ends the session; the agent detaches everything this session set up.
func (c *Conn) Close() error {
	err := c.uc.Close()
	c.fail(net.ErrClosed)
	return err
}

func (c *Conn) fail(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
		close(c.done) // first: a caller that gets err then sees Done
		for id, ch := range c.wait {
			ch <- reply{err: err}
			delete(c.wait, id)
		}
	}
	c.mu.Unlock()
	c.qmu.Lock()
	c.closing = true
	c.qcond.Broadcast()
	c.qmu.Unlock()
}

func (c *Conn) readLoop() {
	for {
		h, p, err := agentproto.ReadFrame(c.uc)
		if err != nil {
			c.fail(err)
			return
		}
		if h.Req == 0 {
			var n Notification
			switch h.Op {
			case agentproto.NoteModuleLoaded:
				m := &agentproto.Module{}
				if agentproto.Unmarshal(p, m) != nil {
					continue
				}
				n.ModuleLoaded = m
			case agentproto.NoteProbeFailed:
				f := &agentproto.ProbeFailed{}
				if agentproto.Unmarshal(p, f) != nil {
					continue
				}
				n.ProbeFailed = f
			case agentproto.NoteUnloading:
				r := &agentproto.IDRequest{}
				if agentproto.Unmarshal(p, r) != nil || r.ID == 0 {
					continue
				}
				n.Unloading = r.ID
			case agentproto.NoteDeviceUsed:
				d := &agentproto.Device{}
				if agentproto.Unmarshal(p, d) != nil || d.Ordinal < 0 || d.Ordinal >= 64 {
					continue
				}
				n.DeviceUsed = d
				if c.autoDeviceReady {
					go c.DeviceReady(d.Ordinal) // not from this goroutine: it reads the reply
				}
			case agentproto.NoteLateTables:
				l := &agentproto.LateTables{}
				if agentproto.Unmarshal(p, l) != nil {
					continue
				}
				n.LateTables = l
			case agentproto.NoteGraphs:
				n.Graphs = true
			default:
				continue // a newer agent's notification
			}
			c.qmu.Lock()
			c.queue = append(c.queue, n)
			c.qcond.Signal()
			c.qmu.Unlock()
			continue
		}
		c.mu.Lock()
		ch := c.wait[h.Req]
		delete(c.wait, h.Req)
		c.mu.Unlock()
		if ch != nil {
			ch <- reply{op: h.Op, p: p}
		}
	}
}

func (c *Conn) deliver() {
	defer close(c.notes)
	for {
		c.qmu.Lock()
		for len(c.queue) == 0 && !c.closing {
			c.qcond.Wait()
		}
		if len(c.queue) == 0 {
			c.qmu.Unlock()
			return
		}
		n := c.queue[0]
		c.queue = c.queue[1:]
		c.qmu.Unlock()
		select {
		case c.notes <- n:
		case <-c.done:
			// keep delivering what was queued until nobody listens
			select {
			case c.notes <- n:
			case <-time.After(100 * time.Millisecond):
				return
			}
		}
	}
}

// SetDeadline makes every request, those already waiting included, fail
// unless answered by t, and gives up on the agent when one is not: a tool
// winding up (Ctrl-C, -d) bounds its last reads and its detach this way.
// The zero time removes it.
func (c *Conn) SetDeadline(t time.Time) {
	c.mu.Lock()
	c.deadline = t
	if c.newDeadline != nil {
		close(c.newDeadline)
	}
	c.newDeadline = make(chan struct{})
	c.mu.Unlock()
	if !t.IsZero() {
		c.uc.SetWriteDeadline(t) // a request being written: every request ends by t
	}
}

// timeoutFor is how long a request for op may wait for its answer when
// sent now.
func (c *Conn) timeoutFor(op agentproto.Op) time.Duration {
	d := CallTimeout
	switch {
	case c.callTimeout > 0:
		d = c.callTimeout
	case op == agentproto.OpLoad:
		d = LoadTimeout
	}
	return d
}

// until is when a request sent at start, allowed d, must be answered by,
// given the deadline now; and a channel closed when that deadline changes.
func (c *Conn) until(start time.Time, d time.Duration) (time.Time, <-chan struct{}) {
	end := start.Add(d)
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.deadline.IsZero() && c.deadline.Before(end) {
		end = c.deadline
	}
	if c.newDeadline == nil {
		c.newDeadline = make(chan struct{})
	}
	return end, c.newDeadline
}

// call sends a request (with fds passed alongside) and decodes the reply
// into out. An agent that does not answer in time is given up: the
// connection is closed, which makes the agent restore the original kernels
// once it runs again, and every later request fails at once instead of
// waiting in turn.
func (c *Conn) call(op agentproto.Op, req agentproto.Message, out agentproto.Message, fds []int) error {
	return c.callWithin(op, req, out, fds, c.timeoutFor(op))
}

// callWithin is call with its own bound on the answer: a request that
// says how long the agent may take (launch) allows that and a margin.
func (c *Conn) callWithin(op agentproto.Op, req agentproto.Message, out agentproto.Message, fds []int, allowed time.Duration) error {
	ch := make(chan reply, 1)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return c.connErr(op, err)
	}
	c.next++
	if c.next == 0 {
		c.next = 1
	}
	id := c.next
	c.wait[id] = ch
	c.mu.Unlock()

	var payload []byte
	if req != nil {
		payload = agentproto.Marshal(req)
	}
	if len(payload) > agentproto.MaxFrame {
		c.forget(id)
		return fmt.Errorf("agent %s: request of %d bytes is over the 64 MiB frame limit", op, len(payload))
	}
	start := time.Now()
	end, changed := c.until(start, allowed)
	frame := agentproto.AppendFrame(nil, op, id, payload)
	c.wmu.Lock()
	// An agent that stopped reading fills the socket buffer: the write
	// itself must not wait longer than the answer may.
	c.uc.SetWriteDeadline(end)
	var err error
	if len(fds) > 0 {
		_, _, err = c.uc.WriteMsgUnix(frame, unix.UnixRights(fds...), nil)
	} else {
		_, err = c.uc.Write(frame)
	}
	c.uc.SetWriteDeadline(time.Time{})
	c.wmu.Unlock()
	if err != nil {
		c.forget(id)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return c.giveUp(op, end.Sub(start))
		}
		// A partly written frame leaves the stream unusable.
		c.fail(err)
		c.uc.Close()
		return c.connErr(op, err)
	}
	var r reply
	timer := time.NewTimer(time.Until(end))
	defer timer.Stop()
wait:
	for {
		select {
		case r = <-ch:
			break wait
		case <-changed: // SetDeadline while waiting
			end, changed = c.until(start, allowed)
			timer.Reset(time.Until(end))
		case <-timer.C:
			c.forget(id)
			return c.giveUp(op, end.Sub(start))
		}
	}
	if r.err != nil {
		return c.connErr(op, r.err)
	}
	if r.op != op {
		return fmt.Errorf("agent %s: reply carries op %s", op, r.op)
	}
	return agentproto.UnmarshalReply(op, r.p, out)
}

func (c *Conn) forget(id uint32) {
	c.mu.Lock()
	delete(c.wait, id)
	c.mu.Unlock()
}

// giveUp ends the connection to an agent that did not answer op within
// timeout.
func (c *Conn) giveUp(op agentproto.Op, timeout time.Duration) error {
	err := &NoAnswerError{PID: c.pid, Op: op, After: timeout}
	c.fail(err)
	c.uc.Close()
	return err
}

// NoAnswerError is a request the agent did not answer in time; the
// connection was given up. It matches os.ErrDeadlineExceeded.
type NoAnswerError struct {
	PID   int
	Op    agentproto.Op
	After time.Duration
}

func (e *NoAnswerError) Error() string {
	return fmt.Sprintf("the gpubpf agent of process %d did not answer %s within %v (is the process stopped, or stuck in a CUDA call?); "+
		"the tool let go of it, and the agent puts the original kernels back when it runs again", e.PID, e.Op, e.After.Round(time.Millisecond))
}

func (e *NoAnswerError) Unwrap() error { return os.ErrDeadlineExceeded }

func (c *Conn) connErr(op agentproto.Op, err error) error {
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return err // it names the request that was not answered
	case errors.Is(err, net.ErrClosed):
		return fmt.Errorf("agent %s: connection closed: %w", op, err)
	}
	return fmt.Errorf("agent %s: the connection to the agent of process %d ended (did the process exit?): %w", op, c.pid, err)
}

// agentPathForAdvice is the agent library a user should preload: the one
// this tool would use itself (see `gpubpf agent-path`).
func agentPathForAdvice() string {
	if p, err := agentlib.Path(); err == nil {
		return p
	}
	return "/path/to/" + agentlib.Name + " (build it with make agent)"
}
