package agentclient

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpubpf/gpubpf/pkg/runtime/agentproto"
)

// stuckAgent is the tool's end of a socketpair whose other end behaves like
// an agent that answers hello and then stops answering: its process was
// stopped, or its thread is stuck in a driver call. With read false the peer
// does not even read (its socket buffer fills).
func stuckAgent(t *testing.T, opts Options, read bool) *Conn {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	unixConn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "socketpair")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		return c.(*net.UnixConn)
	}
	mine, peer := unixConn(fds[0]), unixConn(fds[1])
	t.Cleanup(func() { peer.Close() })
	go func() {
		h, _, err := agentproto.ReadFrame(peer)
		if err != nil || h.Op != agentproto.OpHello {
			return
		}
		hello := agentproto.MarshalReply(&agentproto.Hello{Version: agentproto.Version, PID: 4242})
		peer.Write(agentproto.AppendFrame(nil, agentproto.OpHello, h.Req, hello))
		for read {
			if _, _, err := agentproto.ReadFrame(peer); err != nil {
				return
			}
		}
	}()
	c, err := newConn(mine, 4242, "socketpair", opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// returns runs f, which a deadline must end, and gives its error. What
// ended it is the error's to say (os.ErrDeadlineExceeded, and which
// request); how long it took is not asserted (a busy machine stretches it):
// only a call still waiting after hangAfter fails, as one no deadline ends.
func returns(t *testing.T, what string, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(hangAfter):
		t.Fatalf("%s still waits after %v: no deadline ended it", what, hangAfter)
		return nil
	}
}

// hangAfter tells a call that hangs from one that is slow on a busy
// machine: far beyond any deadline these tests set.
const hangAfter = 60 * time.Second

// A request the agent never answers fails within the deadline, names the
// request and the process, and gives the agent up: the next request fails
// at once instead of waiting its turn, and Done is closed.
func TestCallDeadline(t *testing.T) {
	c := stuckAgent(t, Options{CallTimeout: 200 * time.Millisecond}, true)
	err := returns(t, "an unanswered list", func() error {
		_, err := c.Inventory(true)
		return err
	})
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("unanswered list: %v, want a deadline error", err)
	}
	for _, want := range []string{"process 4242", "did not answer list within 200ms", "stopped"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	select {
	case <-c.Done():
	default:
		t.Error("the connection to the stuck agent is still open")
	}
	err = returns(t, "a request after the agent was given up", func() error {
		_, err := c.Stats()
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "did not answer list") {
		t.Errorf("request after giving up: %v", err)
	}
}

// A tool winding up (Ctrl-C, -d) sets a deadline for its last requests,
// shorter than the per-request one.
func TestSetDeadline(t *testing.T) {
	c := stuckAgent(t, Options{}, true)
	c.SetDeadline(time.Now().Add(150 * time.Millisecond))
	err := returns(t, "detach from a stuck agent", c.Detach)
	if !errors.Is(err, os.ErrDeadlineExceeded) || !strings.Contains(err.Error(), "did not answer detach") {
		t.Fatalf("detach: %v", err)
	}
}

// An agent that stopped reading its socket: the request cannot even be
// written; the write is bounded by the same deadline.
func TestWriteDeadline(t *testing.T) {
	c := stuckAgent(t, Options{CallTimeout: 200 * time.Millisecond}, false)
	err := returns(t, "a 32 MiB write to an agent that reads nothing", func() error {
		return c.Write(OnDevice(0), 0x1000, make([]byte, 32<<20))
	})
	if !errors.Is(err, os.ErrDeadlineExceeded) || !strings.Contains(err.Error(), "did not answer write") {
		t.Fatalf("write: %v", err)
	}
}

// The real agent in a process that gets stopped (SIGSTOP, a debugger): the
// tool's request fails within the deadline, and once the process runs again
// its agent sees the tool gone and launches run the original kernel.
func TestStoppedProcess(t *testing.T) {
	f := build(t)
	a := f.start(t)
	pid := a.cmd.Process.Pid
	c, err := DialWith(pid, Options{CallTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	k, lr := loadVecAddProbe(t, c, ".visible .entry probe_vecAdd (\n)", "probe_vecAdd")
	if err := c.Activate(k.Handle, lr.CloneID, lr.Functions[0].Handle); err != nil {
		t.Fatal(err)
	}
	if got := a.launch("launch"); got != "probe_vecAdd" {
		t.Fatalf("with the probe active the app ran %s", got)
	}
	if err := unix.Kill(pid, unix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer unix.Kill(pid, unix.SIGCONT)
	for i := 0; i < 500 && !stopped(pid); i++ { // the signal is delivered a little later
		time.Sleep(2 * time.Millisecond)
	}
	err = returns(t, "a read from a stopped process", func() error {
		_, err := c.Stats()
		return err
	})
	if !errors.Is(err, os.ErrDeadlineExceeded) || !strings.Contains(err.Error(), "process "+strconv.Itoa(pid)) {
		t.Fatalf("stats of a stopped process: %v", err)
	}
	unix.Kill(pid, unix.SIGCONT)
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := a.launch("launch")
		if got == "_Z6vecAddPfi" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the tool let go, the app still runs %s", got)
		}
		time.Sleep(20 * time.Millisecond) // the agent notices the closed socket
	}
}

// A program started held (TOOL -- CMD sets GPUBPF_AGENT_HOLD) whose tool
// never comes, or a tool that never lets a module unload go on (its last
// look at its maps): the agent releases the program after
// GPUBPF_AGENT_HOLD_MS by itself.
func TestHoldIsBounded(t *testing.T) {
	f := build(t)
	t0 := time.Now()
	a := f.start(t, "GPUBPF_AGENT_HOLD=1", "GPUBPF_AGENT_HOLD_MS=300") // start waits for READY
	// held until its bound, not less (how much longer a busy machine
	// makes it is not asserted: the program came back, which is the point)
	if d := time.Since(t0); d < 250*time.Millisecond {
		t.Errorf("with no tool the first module load was held %v, want about 300ms", d)
	}
	c, err := DialWith(a.cmd.Process.Pid, Options{Hold: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Alloc(OnDevice(0), 64); err != nil { // state here: the tool is owed a last look
		t.Fatal(err)
	}
	t0 = time.Now()
	fmt.Fprintln(a.in, "unload")
	a.expect("UNLOADED")
	if d := time.Since(t0); d < 250*time.Millisecond {
		t.Errorf("an unload waited %v for a tool that never released it, want about 300ms", d)
	}
}

// A deadline set while a request already waits (Ctrl-C during a long JIT)
// applies to it too.
func TestSetDeadlineWhileWaiting(t *testing.T) {
	c := stuckAgent(t, Options{}, true)
	go func() {
		time.Sleep(100 * time.Millisecond)
		c.SetDeadline(time.Now().Add(100 * time.Millisecond))
	}()
	err := returns(t, "a load waiting when the deadline was set", func() error {
		_, err := c.LoadPTX(OnDevice(0), []byte(".entry x ("), "x")
		return err
	})
	if !errors.Is(err, os.ErrDeadlineExceeded) || !strings.Contains(err.Error(), "did not answer load") {
		t.Fatalf("load: %v", err)
	}
}

// stopped reports whether every thread of pid is stopped (state T).
func stopped(pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return false
	}
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		i := strings.LastIndexByte(string(b), ')')
		if err != nil || i < 0 || i+2 >= len(b) || b[i+2] != 'T' {
			return false
		}
	}
	return true
}
