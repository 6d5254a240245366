package agentclient

// The agent run as a program (direct mode, pkg/runtime/agent/direct.c): the
// host process of gpubpf run --direct, with the fake libcuda or with none.

import (
	"bufio"
	"errors"
	"github.com/gpubpf/gpubpf/internal/testenv"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gpubpf/gpubpf/pkg/runtime/agentproto"
)

// host is the agent library executed in direct mode.
type host struct {
	t      *testing.T
	cmd    *exec.Cmd
	lines  chan string
	stderr *testenv.LogBuffer
	exited chan error
}

// startHost executes the agent library with GPUBPF_AGENT_DIRECT=1; withCUDA
// puts the fake libcuda on the loader's path.
func (f fixture) startHost(t *testing.T, withCUDA bool, env ...string) *host {
	t.Helper()
	cmd := exec.Command(f.agent)
	cmd.Env = append(os.Environ(), "GPUBPF_AGENT_DIRECT=1", "GPUBPF_AGENT_SOCKET_DIR="+f.sockDir, "LD_LIBRARY_PATH=")
	if withCUDA {
		cmd.Env = append(cmd.Env, "LD_LIBRARY_PATH="+f.cudaDir)
	}
	cmd.Env = append(cmd.Env, env...)
	out, _ := cmd.StdoutPipe()
	var se testenv.LogBuffer
	cmd.Stderr = &se
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &host{t: t, cmd: cmd, lines: make(chan string, 100), stderr: &se, exited: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			h.lines <- sc.Text()
		}
		close(h.lines)
		h.exited <- cmd.Wait()
	}()
	t.Cleanup(func() { cmd.Process.Kill() })
	return h
}

// dial connects once the host's socket is up.
func (h *host) dial() *Conn {
	h.t.Helper()
	pid := h.cmd.Process.Pid
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := Dial(pid)
		if err == nil {
			h.t.Cleanup(func() { c.Close() })
			return c
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("dial host %d: %v; stderr: %s", pid, err, h.stderr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// exit waits for the host to end and returns its exit status.
func (h *host) exit(limit time.Duration) int {
	h.t.Helper()
	select {
	case err := <-h.exited:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			h.t.Fatal(err)
		}
		return 0
	case <-time.After(limit):
		h.t.Fatalf("the host still runs after %v; stderr: %s", limit, h.stderr)
	}
	return -1
}

func (h *host) expect(prefix string) string {
	h.t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case l, ok := <-h.lines:
			if !ok {
				h.t.Fatalf("host exited while waiting for %q; stderr: %s", prefix, h.stderr)
			}
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case <-timeout:
			h.t.Fatalf("timed out waiting for %q", prefix)
		}
	}
}

const directPTX = ".version 7.8\n.target sm_90\n.address_size 64\n.visible .entry gpubpf_direct_p()\n{\n\tret;\n}\n"

func TestDirectHostLaunches(t *testing.T) {
	f := build(t)
	h := f.startHost(t, true)
	c := h.dial()
	info := c.Info()
	if !info.Direct || !info.CUDAReady || info.CUDAError != "" || len(info.Devices) != 1 || !strings.HasSuffix(info.Exe, "libgpubpf-agent.so") {
		t.Fatalf("hello: %+v", info)
	}
	// Maps are placed as in an application.
	addr, err := c.Alloc(OnDevice(0), 64)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Write(OnDevice(0), addr, []byte("direct")); err != nil {
		t.Fatal(err)
	}
	if b, err := c.Read(OnDevice(0), addr, 6); err != nil || string(b) != "direct" {
		t.Fatalf("read %q %v", b, err)
	}
	lr, err := c.LoadPTX(OnDevice(0), []byte(directPTX), "gpubpf_direct_p")
	if err != nil {
		t.Fatal(err)
	}
	fn := lr.Functions[0].Handle
	rep, err := c.Launch(agentproto.LaunchRequest{Target: OnDevice(0), Function: fn, Grid: [3]uint32{4, 2, 1},
		Block: [3]uint32{256, 1, 1}, Params: make([]byte, 8), TimeoutMs: 5000})
	if err != nil {
		t.Fatal(err)
	}
	// The fake driver's events say 0.0125 ms.
	if !rep.Timed || rep.KernelNanos != 12500 {
		t.Errorf("launch reply %+v, want the events' 12500 ns", rep)
	}
	if l := h.expect("DIRECT "); l != "DIRECT gpubpf_direct_p grid 4,2,1 block 256,1,1 params 8" {
		t.Errorf("the driver saw %q", l)
	}
	// What the agent refuses, it refuses before the driver sees it.
	for _, tc := range []struct {
		req    agentproto.LaunchRequest
		status int32
		says   string
	}{
		{agentproto.LaunchRequest{Target: OnDevice(0), Function: fn + 8, Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{1, 1, 1}},
			agentproto.StatusNotFound, "was not loaded by this session"},
		{agentproto.LaunchRequest{Target: OnDevice(0), Function: fn, Grid: [3]uint32{0, 1, 1}, Block: [3]uint32{1, 1, 1}},
			agentproto.StatusBadRequest, "every dimension must be at least 1"},
		{agentproto.LaunchRequest{Target: OnDevice(0), Function: fn, Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{1, 1, 1},
			Params: make([]byte, agentproto.LaunchMaxParams+1)}, agentproto.StatusBadRequest, "the driver takes at most 32764"},
	} {
		_, err := c.Launch(tc.req)
		var ae *agentproto.Error
		if !errors.As(err, &ae) || ae.Status != tc.status || !strings.Contains(ae.Message, tc.says) {
			t.Errorf("launch %+v: got %v, want status %d saying %q", tc.req.Grid, err, tc.status, tc.says)
		}
	}
	// One session: a second tool is turned away.
	if c2, err := DialWith(h.cmd.Process.Pid, Options{Timeout: 2 * time.Second}); err == nil {
		c2.Close()
		t.Error("a second connection to a direct host was served")
	}
	// The session's end ends the host.
	c.Close()
	if code := h.exit(10 * time.Second); code != 0 {
		t.Fatalf("host exit status %d; stderr: %s", code, h.stderr)
	}
	if !h.stderr.Has("direct mode serves one tool; refused a second connection") {
		t.Errorf("the refused connection was not logged: %s", h.stderr)
	}
}

// On a machine without the driver (CPU CI) the host still serves its tool,
// and says why CUDA cannot be used: in hello, and in the answer to every op
// that needs the driver.
func TestDirectHostWithoutCUDA(t *testing.T) {
	f := build(t)
	if _, err := os.Stat("/dev/nvidiactl"); err == nil {
		t.Skip("this machine has an NVIDIA driver")
	}
	h := f.startHost(t, false)
	c := h.dial()
	info := c.Info()
	if !info.Direct || info.CUDAReady || !strings.Contains(info.CUDAError, "cannot load the CUDA driver library libcuda.so.1") ||
		!strings.Contains(info.CUDAError, "machine with an NVIDIA GPU") {
		t.Fatalf("hello: %+v", info)
	}
	_, err := c.Alloc(OnDevice(0), 64)
	var ae *agentproto.Error
	if !errors.As(err, &ae) || ae.Status != agentproto.StatusUnsupported || !strings.Contains(ae.Message, "libcuda.so.1") {
		t.Fatalf("alloc without CUDA: %v", err)
	}
	c.Close()
	if code := h.exit(10 * time.Second); code != 0 {
		t.Fatalf("host exit status %d; stderr: %s", code, h.stderr)
	}
}

func TestDirectHostLaunchTimeout(t *testing.T) {
	f := build(t)
	h := f.startHost(t, true, "FAKECUDA_LAUNCH_STALL_MS=3000")
	c := h.dial()
	lr, err := c.LoadPTX(OnDevice(0), []byte(directPTX), "gpubpf_direct_p")
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Launch(agentproto.LaunchRequest{Target: OnDevice(0), Function: lr.Functions[0].Handle,
		Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{1, 1, 1}, TimeoutMs: 200})
	var ae *agentproto.Error
	if !errors.As(err, &ae) || ae.Status != agentproto.StatusCUDA || ae.CUResult != agentproto.LaunchTimedOut ||
		!strings.Contains(ae.Message, "did not finish within 200 ms") {
		t.Fatalf("launch of a stuck kernel: %v", err) // its 200 ms timeout, not the kernel's 3 s, ended it
	}
}

// A host no tool reaches (its tool died before connecting) ends by itself.
func TestDirectHostWaitIsBounded(t *testing.T) {
	f := build(t)
	h := f.startHost(t, true, "GPUBPF_AGENT_DIRECT_WAIT_MS=200")
	if code := h.exit(10 * time.Second); code != 3 {
		t.Fatalf("exit status %d, want 3", code)
	}
	if !h.stderr.Has("no gpubpf tool connected within 0.2 s") {
		t.Fatalf("stderr: %s", h.stderr)
	}
}

// Run by hand, the library says what it is and exits.
func TestAgentRunByHand(t *testing.T) {
	f := build(t)
	cmd := exec.Command(f.agent)
	cmd.Env = append(os.Environ(), "GPUBPF_AGENT_DIRECT=")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "LD_PRELOAD=") ||
		!strings.Contains(string(out), "gpubpf run --direct") {
		t.Fatalf("%v: %s", err, out)
	}
}

// Inside an application the agent never launches a tool's kernels.
func TestLaunchRefusedInApplication(t *testing.T) {
	f := build(t)
	a := f.start(t, "GPUBPF_AGENT_DIRECT=1") // the variable alone does not make direct mode
	c, err := Dial(a.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Info().Direct {
		t.Fatal("a preloaded agent says it is in direct mode")
	}
	_, lr := loadVecAddProbe(t, c, ".entry gpubpf_direct_p (", "gpubpf_direct_p")
	_, err = c.Launch(agentproto.LaunchRequest{Target: OnDevice(0), Function: lr.Functions[0].Handle,
		Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{1, 1, 1}})
	var ae *agentproto.Error
	if !errors.As(err, &ae) || ae.Status != agentproto.StatusUnsupported ||
		!strings.Contains(ae.Message, "only as the host process of a direct run (gpubpf run --direct)") {
		t.Fatalf("launch in an application: %v", err)
	}
	if got := a.launch("launch"); got != "_Z6vecAddPfi" {
		t.Fatalf("the application's own launch ran %s", got)
	}
}
