package inject

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gpubpf/gpubpf/pkg/procmaps"
)

// rtldNow is dlopen's RTLD_NOW; RTLD_LOCAL (0) keeps the library's symbols
// out of the process's global scope, so nothing the program resolves later
// binds to it by accident.
const rtldNow = 2

// Blocking system calls a thread waits in without holding a C-library lock
// (x86-64 numbers): a thread interrupted in one of them may call dlopen.
var safeSyscalls = map[uint64]bool{
	0:   true, // read
	7:   true, // poll
	16:  true, // ioctl (CUDA's waits on the driver)
	23:  true, // select
	35:  true, // nanosleep
	45:  true, // recvfrom
	47:  true, // recvmsg
	61:  true, // wait4
	202: true, // futex
	230: true, // clock_nanosleep
	232: true, // epoll_wait
	270: true, // pselect6
	271: true, // ppoll
	281: true, // epoll_pwait
	441: true, // epoll_pwait2
}

// minCallTime is the least a dlopen call is waited for (see injectLocked).
const minCallTime = 30 * time.Second

// maxTries bounds how many stopped threads are let go as unsafe before
// giving up.
const maxTries = 200

// inject is Inject's ptrace part. ptrace ties a tracee to the OS thread
// that attached it, so it all runs on one locked thread.
func inject(pid int, lib string, fns *functions, ms procmaps.Maps, opts Options) (*Result, error) {
	type out struct {
		r   *Result
		err error
	}
	ch := make(chan out, 1)
	go func() {
		runtime.LockOSThread()
		// Not unlocked: a thread that ever traced is not handed back
		// to other goroutines (the runtime then ends it).
		r, err := injectLocked(pid, lib, fns, opts)
		ch <- out{r, err}
	}()
	o := <-ch
	return o.r, o.err
}

func injectLocked(pid int, lib string, fns *functions, opts Options) (*Result, error) {
	deadline := time.Now().Add(opts.Timeout)
	res := &Result{}
	for tries := 0; tries < maxTries; tries++ {
		if time.Now().After(deadline) {
			break
		}
		tids, err := threads(pid)
		if err != nil {
			return nil, err
		}
		tid := tids[tries%len(tids)]
		t, err := stop(tid, deadline)
		if err != nil {
			if errors.Is(err, unix.ESRCH) {
				continue // the thread ended: try another
			}
			if errors.Is(err, unix.EPERM) {
				return nil, fmt.Errorf("%w: ptrace of process %d refused (%v): run as root or with CAP_SYS_PTRACE", ErrUnsupported, pid, err)
			}
			return nil, fmt.Errorf("stopping thread %d of process %d: %w", tid, pid, err)
		}
		if !safeStop(&t.regs, fns) {
			t.release()
			res.Tries++
			time.Sleep(time.Millisecond)
			continue
		}
		res.Thread = tid
		// The call itself gets longer: once it runs it cannot be
		// taken back, and a thread let go inside it would return to
		// address 0 and take the process down.
		err = t.callDlopen(pid, lib, fns, time.Now().Add(max(opts.Timeout, minCallTime)), res)
		res.Stopped = time.Since(t.since)
		return res, err
	}
	return nil, fmt.Errorf("process %d: no thread was found in a safe place to load the agent in %v (%d tries: every thread was inside the C library or the dynamic loader); try again", pid, opts.Timeout, res.Tries)
}

// safeStop says whether a thread stopped with regs may call dlopen.
func safeStop(regs *unix.PtraceRegs, fns *functions) bool {
	if int64(regs.Orig_rax) >= 0 && safeSyscalls[regs.Orig_rax] {
		return true
	}
	return !fns.inUnsafe(regs.Rip)
}

// stopped is one thread held by ptrace, with what it must get back.
type stopped struct {
	tid   int
	since time.Time
	regs  unix.PtraceRegs
	fp    []byte // NT_X86_XSTATE: x87, SSE, AVX state
}

// stop seizes and interrupts thread tid and saves its registers.
func stop(tid int, deadline time.Time) (*stopped, error) {
	if err := unix.PtraceSeize(tid); err != nil {
		return nil, err
	}
	t := &stopped{tid: tid, since: time.Now()}
	if err := unix.PtraceInterrupt(tid); err != nil {
		unix.PtraceDetach(tid)
		return nil, err
	}
	for {
		ws, err := t.wait(deadline)
		if err != nil {
			unix.PtraceDetach(tid)
			return nil, err
		}
		if eventStop(ws) {
			break
		}
		// A signal was on its way to the thread: deliver it and wait
		// for our interrupt, still pending, to stop it.
		if err := unix.PtraceCont(tid, int(ws.StopSignal())); err != nil {
			unix.PtraceDetach(tid)
			return nil, err
		}
	}
	if err := unix.PtraceGetRegs(tid, &t.regs); err != nil {
		unix.PtraceDetach(tid)
		return nil, err
	}
	fp, err := getXState(tid)
	if err != nil {
		unix.PtraceDetach(tid)
		return nil, fmt.Errorf("saving the vector registers: %w", err)
	}
	t.fp = fp
	return t, nil
}

// release lets the thread go on untouched.
func (t *stopped) release() { unix.PtraceDetach(t.tid) }

// restore puts every register back and lets the thread go on: one blocked
// in a system call restarts it, as after a signal.
func (t *stopped) restore() error {
	err := setXState(t.tid, t.fp)
	if e := unix.PtraceSetRegs(t.tid, &t.regs); e != nil && err == nil {
		err = e
	}
	if e := unix.PtraceDetach(t.tid); e != nil && err == nil {
		err = e
	}
	return err
}

// wait waits (bounded) for the thread's next stop and returns its status.
func (t *stopped) wait(deadline time.Time) (unix.WaitStatus, error) {
	for {
		var ws unix.WaitStatus
		n, err := unix.Wait4(t.tid, &ws, unix.WALL|unix.WNOHANG, nil)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return ws, err
		}
		if n == t.tid {
			if ws.Exited() || ws.Signaled() {
				return ws, fmt.Errorf("the thread ended (%v)", ws)
			}
			return ws, nil
		}
		if time.Now().After(deadline) {
			return ws, fmt.Errorf("timed out waiting for thread %d to stop", t.tid)
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// callDlopen makes the stopped thread call dlopen(lib, RTLD_NOW) and
// return to address 0, where the fault stops it again for us; then every
// register is restored.
func (t *stopped) callDlopen(pid int, lib string, fns *functions, deadline time.Time, res *Result) error {
	handle, err := t.call(fns.dlopen, deadline, res, func(r *unix.PtraceRegs, sp uint64) (uint64, error) {
		// The path goes below the red zone (128 bytes the code
		// we interrupted may use without moving rsp).
		path := append([]byte(lib), 0)
		at := (sp - 256 - uint64(len(path))) &^ 15
		if err := poke(t.tid, at, path); err != nil {
			return 0, err
		}
		r.Rdi, r.Rsi = at, rtldNow
		return at, nil
	})
	if err != nil {
		return err
	}
	if handle != 0 {
		return nil
	}
	why := "no reason given"
	if fns.dlerror != 0 {
		if t2, err := stop(t.tid, deadline); err == nil {
			if msg, err := t2.call(fns.dlerror, deadline, nil, func(*unix.PtraceRegs, uint64) (uint64, error) { return 0, nil }); err == nil && msg != 0 {
				if s, err := peekString(pid, msg, 512); err == nil {
					why = s
				}
			}
		}
	}
	return fmt.Errorf("dlopen of %s in process %d failed: %s", lib, pid, why)
}

// call runs fn in the stopped thread with the arguments set by args (which
// may write below the stack pointer it is given and returns the lowest
// address it used, or 0), then restores the thread and detaches. It
// returns fn's result (rax).
func (t *stopped) call(fn uint64, deadline time.Time, res *Result, args func(*unix.PtraceRegs, uint64) (uint64, error)) (uint64, error) {
	r := t.regs
	low, err := args(&r, t.regs.Rsp)
	if err != nil {
		t.restore()
		return 0, err
	}
	if low == 0 {
		low = t.regs.Rsp - 256
	}
	// A call site: rsp+8 16-byte aligned, the return address 0 on top.
	sp := (low - 64) &^ 15
	sp -= 8
	if err := poke(t.tid, sp, make([]byte, 8)); err != nil {
		t.restore()
		return 0, err
	}
	r.Rsp, r.Rip, r.Rax = sp, fn, 0
	r.Orig_rax = ^uint64(0) // not in a system call: no restart while fn runs
	r.Eflags &^= 1 << 10    // the ABI wants the direction flag clear
	if err := unix.PtraceSetRegs(t.tid, &r); err != nil {
		t.restore()
		return 0, err
	}
	start := time.Now()
	sig := 0
	for {
		if err := unix.PtraceCont(t.tid, sig); err != nil {
			return 0, fmt.Errorf("resuming thread %d: %w", t.tid, err)
		}
		ws, err := t.wait(deadline)
		if err != nil {
			// Still inside fn past the deadline: let it finish on its
			// own (it then faults at address 0: nothing to restore to).
			unix.PtraceDetach(t.tid)
			return 0, fmt.Errorf("the call in thread %d did not return in time: %w", t.tid, err)
		}
		sig = 0
		if !ws.Stopped() {
			continue
		}
		var now unix.PtraceRegs
		if err := unix.PtraceGetRegs(t.tid, &now); err != nil {
			return 0, err
		}
		if ws.StopSignal() == syscall.SIGSEGV && now.Rip == 0 {
			if res != nil {
				res.Call = time.Since(start)
			}
			if err := t.restore(); err != nil {
				return 0, fmt.Errorf("restoring thread %d: %w", t.tid, err)
			}
			return now.Rax, nil
		}
		if ws.StopSignal() == syscall.SIGSEGV || ws.StopSignal() == syscall.SIGBUS || ws.StopSignal() == syscall.SIGILL {
			t.restore()
			return 0, fmt.Errorf("the call faulted in thread %d (%v at %#x); its registers were restored", t.tid, ws.StopSignal(), now.Rip)
		}
		if eventStop(ws) {
			continue // a group stop: go on with the call
		}
		sig = int(ws.StopSignal()) // the program's own signal: deliver it
	}
}

// poke writes b at addr in the thread's process.
func poke(tid int, addr uint64, b []byte) error {
	if _, err := unix.PtracePokeData(tid, uintptr(addr), b); err != nil {
		return fmt.Errorf("writing the target's stack: %w", err)
	}
	return nil
}

// peekString reads a C string of at most n bytes at addr.
func peekString(pid int, addr uint64, n int) (string, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		return "", err
	}
	defer f.Close()
	b := make([]byte, n)
	k, err := f.ReadAt(b, int64(addr))
	if k == 0 {
		return "", err
	}
	return cString(b[:k]), nil
}

// xstateMax fits the largest XSAVE area (AVX-512, AMX tiles: ~11 KiB).
const xstateMax = 16 << 10

func getXState(tid int) ([]byte, error) {
	buf := make([]byte, xstateMax)
	iov := unix.Iovec{Base: &buf[0]}
	iov.SetLen(len(buf))
	if err := ptraceRegSet(unix.PTRACE_GETREGSET, tid, &iov); err != nil {
		return nil, err
	}
	return buf[:iov.Len], nil
}

func setXState(tid int, b []byte) error {
	if len(b) == 0 {
		return nil
	}
	iov := unix.Iovec{Base: &b[0]}
	iov.SetLen(len(b))
	return ptraceRegSet(unix.PTRACE_SETREGSET, tid, &iov)
}

func ptraceRegSet(req, tid int, iov *unix.Iovec) error {
	_, _, e := unix.Syscall6(unix.SYS_PTRACE, uintptr(req), uintptr(tid), uintptr(unix.NT_X86_XSTATE), uintptr(unsafe.Pointer(iov)), 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

// eventStop reports a PTRACE_EVENT_STOP (our interrupt, or a group stop of
// a seized thread), as opposed to a signal about to be delivered.
func eventStop(ws unix.WaitStatus) bool { return uint32(ws)>>16 == unix.PTRACE_EVENT_STOP }
