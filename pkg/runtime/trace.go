package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gpubpf/gpubpf/pkg/runtime/agentclient"
	"github.com/gpubpf/gpubpf/pkg/runtime/agentlib"
	"github.com/gpubpf/gpubpf/pkg/runtime/cudawatch"
	"github.com/gpubpf/gpubpf/pkg/runtime/launch"
)

// Targets say what a tool traces (CLI.md "Invocation").
type Targets struct {
	// PIDs are running processes (-p).
	PIDs []int
	// Command is started traced (-- CMD ARGS).
	Command []string
	// CUDA (--all): every CUDA process of the host, running now or
	// initialising CUDA while the tool runs, the agent loaded into each
	// that has none (as -p does). Without it and without PIDs or a
	// command: every process that has the agent.
	CUDA bool
}

// All reports whether the tool traces every process (no -p, no command).
func (t Targets) All() bool { return len(t.PIDs) == 0 && len(t.Command) == 0 }

// Describe is the target part of a tool's start line.
func (t Targets) Describe() string {
	switch {
	case len(t.Command) > 0:
		return fmt.Sprintf("in %s", t.Command[0])
	case len(t.PIDs) == 1:
		return fmt.Sprintf("in PID %d", t.PIDs[0])
	case len(t.PIDs) > 1:
		return fmt.Sprintf("in PIDs %v", t.PIDs)
	case t.CUDA:
		return "in every CUDA process of this host (and each new one as it initialises CUDA)"
	}
	return "in every process with the gpubpf agent"
}

// Check finds what cannot be traced before a tool prints its start line:
// a PID that is not running, a command that cannot be started, the agent
// library a command needs. Its error is the whole answer (CLI.md).
func (t Targets) Check() error {
	for _, pid := range t.PIDs {
		if !processAlive(pid) {
			return fmt.Errorf("no process %d is running: check the PID (pgrep -a NAME lists a program's)", pid)
		}
	}
	if len(t.Command) > 0 {
		if _, err := exec.LookPath(t.Command[0]); err != nil {
			return fmt.Errorf("cannot run %s (%w): check the command's name, or give its path", t.Command[0], err)
		}
		if _, err := agentlib.Path(); err != nil {
			return err
		}
	}
	return nil
}

// NoCUDAError says that a traced command ended without giving anything to
// trace: it never loaded a CUDA kernel (or not one the tool's programs
// target), so every count is zero for a reason the user should hear.
type NoCUDAError struct {
	Command string
	Code    int
	Before  bool // it exited before the tool could reach its agent
	// PID is set when the command was still running as the trace ended
	// (-d, Ctrl-C): it runs on, untraced.
	PID int
}

func (e *NoCUDAError) Error() string {
	if e.PID != 0 {
		return fmt.Sprintf("%s (PID %d) loaded no CUDA kernel before the trace ended: nothing was traced, and it runs on untraced; give it longer with -d, or attach later with -p %d", e.Command, e.PID, e.PID)
	}
	what := "without loading any CUDA kernel"
	if e.Before {
		what = "before it used CUDA"
	}
	hint := fmt.Sprintf("is it the CUDA program you meant? (gpubpf kernels %s lists the kernels a binary holds)", e.Command)
	if !driverPresent() {
		// the usual reason on a machine without a GPU: say that
		hint = "this machine has no NVIDIA driver (no /dev/nvidiactl): the GPU tools need one; gpubpf kernels, ptx and verify work without"
	}
	return fmt.Sprintf("%s exited (status %d) %s: nothing was traced; %s", e.Command, e.Code, what, hint)
}

// driverPresent says whether the machine has an NVIDIA driver's device
// nodes (/dev/dxg: WSL's).
func driverPresent() bool {
	for _, p := range []string{"/dev/nvidiactl", "/dev/dxg"} {
		if _, err := os.Stat(p); err == nil {
			return true
		}
	}
	return false
}

// agentWait bounds how long a started command may take to bring its agent up.
const agentWait = 10 * time.Second

// allScanInterval is how often tracing "all" looks for new agents.
const allScanInterval = 250 * time.Millisecond

// ctrlCGrace is how long a traced command has to exit after Ctrl-C (it got
// the signal too, from the same terminal) before the tool stops waiting
// for its exit status and lets it run on.
const ctrlCGrace = 2 * time.Second

// windUpTime bounds what the tool still asks of the agents once tracing
// has ended (Ctrl-C, -d, the command's exit): the last map reads, the final
// ring drains and the detach. A healthy agent does all of it in
// milliseconds (tens of them for a 1 GiB per-thread array); an agent that
// has not answered in 5 s will not (its process is stopped, or a kernel
// never ends), and a tool that takes longer to quit looks hung.
const windUpTime = 5 * time.Second

// Trace attaches to the targets and traces until ctx is done or, with a
// command, until the command exits. It returns the command's exit status
// (0 without a command). Errors attaching to a process the user named are
// returned; in "all" mode they are logged and the process skipped. A CPU
// program that could not be attached where the process had all its
// libraries is an error too, once the trace is over.
func (s *Session) Trace(ctx context.Context, t Targets) (code int, err error) {
	start := time.Now()
	defer func() {
		s.windUp()
		if err == nil {
			err = s.uprobeError()
		}
	}()
	switch {
	case len(t.Command) > 0:
		return s.traceCommand(ctx, t.Command, start)
	case len(t.PIDs) > 0:
		for _, pid := range t.PIDs {
			if _, err := s.Attach(pid, AttachOptions{Start: start, Context: ctx}); err != nil {
				return 0, err
			}
		}
		// A traced process that exits ends its part of the trace; when all
		// are gone the trace is over.
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return 0, nil
			case <-tick.C:
				if s.allGone() {
					s.warnf("%s exited; the trace ends with what it recorded", pidList(t.PIDs))
					return 0, nil
				}
			}
		}
	case t.CUDA:
		return 0, s.traceCUDA(ctx, start)
	default:
		return 0, s.traceAll(ctx, start)
	}
}

// traceCUDA (--all) attaches to every CUDA process of the host: those that
// map libcuda now, and each that calls cuInit from now on (a uprobe on the
// library, cudawatch), until ctx ends; processes come and go.
func (s *Session) traceCUDA(ctx context.Context, start time.Time) error {
	var mu sync.Mutex
	tried := map[int]bool{}
	attach := func(pid int) {
		mu.Lock()
		seen := tried[pid]
		tried[pid] = true
		mu.Unlock()
		if seen || pid == os.Getpid() {
			return
		}
		if _, err := s.Attach(pid, AttachOptions{Start: start, Context: ctx}); err != nil {
			s.warnf("process %d: %v", pid, err)
		}
	}
	// The watch first: a process that starts CUDA while the running ones
	// are listed is seen by one or the other.
	w, err := cudawatch.Start(ctx, cudawatch.Libraries(), attach)
	if err != nil {
		return err
	}
	for _, pid := range cudawatch.Running() {
		if ctx.Err() != nil {
			break
		}
		attach(pid)
	}
	select {
	case <-ctx.Done():
		<-w.Done()
		return nil
	case err := <-w.Done():
		return err
	}
}

// windUp gives every agent windUpTime to answer what the tool still asks
// (once: the trace's end, or Close for a tool that never traced).
func (s *Session) windUp() {
	s.mu.Lock()
	if s.woundUp {
		s.mu.Unlock()
		return
	}
	s.woundUp = true
	s.mu.Unlock()
	dl := time.Now().Add(windUpTime)
	for _, p := range s.Processes() {
		if p.conn != nil {
			p.conn.SetDeadline(dl)
			p.stopProbes()
		}
	}
}

// uprobeError is the first CPU program failure the user was warned of that
// no later try made good.
func (s *Session) uprobeError() error {
	s.mu.Lock()
	procs := s.everyProcessLocked()
	s.mu.Unlock()
	sort.Slice(procs, func(i, j int) bool { return procs[i].PID < procs[j].PID })
	for _, p := range procs {
		p.mu.Lock()
		err, final := p.upErr, p.upFinal
		p.mu.Unlock()
		if err != nil && final {
			return fmt.Errorf("process %d: %w", p.PID, err)
		}
	}
	return nil
}

func (s *Session) allGone() bool {
	for _, p := range s.Processes() {
		if p.conn == nil {
			if processAlive(p.PID) {
				return false
			}
			continue
		}
		select {
		case <-p.conn.Done():
		default:
			return false
		}
	}
	return true
}

func (s *Session) traceCommand(ctx context.Context, argv []string, start time.Time) (int, error) {
	var env []string
	if s.wantsSanitizer() {
		// kernels without PTX can then be traced inside (docs/sanitizer.md)
		env = append(env, "GPUBPF_SANITIZER=on")
	}
	cmd, err := launch.Start(argv, launch.Options{Agent: true, Hold: true, Env: env})
	if err != nil {
		return 0, err
	}
	if err := cmd.Release(); err != nil {
		cmd.Cmd.Process.Kill()
		cmd.Wait()
		return 0, err
	}
	pid := cmd.PID()
	done := make(chan error, 1)
	if _, err := s.Attach(pid, AttachOptions{Hold: true, Start: start, Wait: agentWait, Context: ctx}); err != nil {
		// The program runs on untraced rather than being killed: it is the
		// user's work. Say why now, and wait for it while the trace lasts.
		gone := processExited(pid)
		var noAgent *NoAgentYetError
		if !errors.As(err, &noAgent) && !gone {
			s.warnf("not tracing %s: %v; it runs on untraced", argv[0], err)
		}
		go func() { done <- cmd.Wait() }()
		select {
		case werr := <-done:
			code := waitCode(werr)
			if gone {
				return code, &NoCUDAError{Command: argv[0], Code: code, Before: true}
			}
			return code, err
		case <-ctx.Done():
			return 0, err
		}
	}
	go func() { done <- cmd.Cmd.Wait() }()
	select {
	case err := <-done:
		return waitCode(err), nil
	case <-ctx.Done():
		// Ctrl-C: the program got it too (same terminal); give it a
		// moment. At -d's end it got nothing and runs on.
		grace := ctrlCGrace
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			grace = 0
		}
		select {
		case err := <-done:
			return waitCode(err), nil
		case <-time.After(grace):
			s.mu.Lock()
			s.running = pid
			s.mu.Unlock()
			return 0, nil
		}
	}
}

// CommandRunning is the PID of the command the tool started if it was
// still running when the trace ended (it runs on, detached), else 0.
func (s *Session) CommandRunning() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.running
}

// waitCode is the exit status the tool passes on for a command: the
// shell's 128+N for one killed by signal N.
func waitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	if err != nil {
		return 1
	}
	return 0
}

func (s *Session) traceAll(ctx context.Context, start time.Time) error {
	tried := map[int]bool{}
	tick := time.NewTicker(allScanInterval)
	defer tick.Stop()
	for {
		agents, err := agentclient.List("")
		if err != nil {
			return err
		}
		for _, a := range agents {
			if tried[a.PID] {
				continue
			}
			tried[a.PID] = true
			if _, err := s.Attach(a.PID, AttachOptions{Start: start, Context: ctx}); err != nil {
				s.logf("process %d: %v", a.PID, err)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// pidList names the traced processes: "process 12", "processes 12, 13".
func pidList(pids []int) string {
	if len(pids) == 1 {
		return fmt.Sprintf("process %d", pids[0])
	}
	s := make([]string, len(pids))
	for i, p := range pids {
		s[i] = strconv.Itoa(p)
	}
	return "processes " + strings.Join(s, ", ")
}
