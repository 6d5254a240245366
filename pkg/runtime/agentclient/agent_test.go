package agentclient

// End-to-end tests of the C agent and this client on a machine without a
// GPU: gcc builds the agent, a fake libcuda.so.1 and a small app (sources in
// pkg/runtime/agent/testdata); the app runs with the agent preloaded and the
// test drives it over the control socket.

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpubpf/gpubpf/internal/testenv"
	"github.com/gpubpf/gpubpf/pkg/runtime/agentproto"
)

const helperEnv = "GPUBPF_AGENTCLIENT_HELPER"

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "":
		os.Exit(m.Run())
	case "attach":
		os.Exit(helperAttach())
	case "dial":
		pid, _ := strconv.Atoi(os.Getenv("GPUBPF_TEST_PID"))
		c, err := Dial(pid)
		if err != nil {
			fmt.Println("DIALERR", err)
			os.Exit(0)
		}
		c.Close()
		fmt.Println("DIALOK")
		os.Exit(0)
	}
}

// helperAttach activates a probe and then waits to be killed.
func helperAttach() int {
	pid, _ := strconv.Atoi(os.Getenv("GPUBPF_TEST_PID"))
	c, err := Dial(pid)
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	inv, err := c.Inventory(true)
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	k := findKernel(inv, "_Z6vecAddPfi", agentproto.KindKernel)
	lr, err := c.LoadPTX(OnDevice(0), []byte(".entry killed_probe ("), "killed_probe")
	if err != nil || k == nil {
		fmt.Println("ERR", err)
		return 1
	}
	if err := c.Activate(k.Handle, lr.CloneID, lr.Functions[0].Handle); err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	fmt.Println("ACTIVE")
	time.Sleep(time.Minute)
	return 0
}

func findKernel(inv *agentproto.Inventory, name string, kind agentproto.KernelKind) *agentproto.Kernel {
	for i := range inv.Kernels {
		if inv.Kernels[i].Name == name && inv.Kernels[i].Kind == kind {
			return &inv.Kernels[i]
		}
	}
	return nil
}

// loadVecAddProbe loads a probe module with function fn through c and
// returns the app's vecAdd kernel and the load's reply: how most agent
// tests start.
func loadVecAddProbe(t *testing.T, c *Conn, ptx, fn string) (*agentproto.Kernel, *agentproto.LoadReply) {
	t.Helper()
	inv, err := c.Inventory(true)
	if err != nil {
		t.Fatal(err)
	}
	k := findKernel(inv, "_Z6vecAddPfi", agentproto.KindKernel)
	lr, err := c.LoadPTX(OnDevice(0), []byte(ptx), fn)
	if err != nil || k == nil {
		t.Fatalf("load %s: %v (kernel %v)", fn, err, k)
	}
	return k, lr
}

type fixture struct {
	dir, agent, app, cudaDir, sockDir string
}

func build(t *testing.T) fixture {
	t.Helper()
	// A directory others can traverse, so the peer-credential test can try
	// to connect as another user.
	dir, err := os.MkdirTemp("", "gpubpf-agent-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	rig := testenv.BuildStandIn(t, dir)
	f := fixture{dir: dir, agent: rig.Agent, app: rig.App, cudaDir: rig.CUDADir, sockDir: filepath.Join(dir, "sock")}
	os.MkdirAll(f.sockDir, 0o755)
	os.Chmod(f.sockDir, 0o755)
	t.Setenv("GPUBPF_AGENT_SOCKET_DIR", f.sockDir)
	return f
}

type app struct {
	t      *testing.T
	cmd    *exec.Cmd
	in     io.WriteCloser
	lines  chan string
	stderr *testenv.LogBuffer
}

func (f fixture) start(t *testing.T, env ...string) *app {
	cmd := exec.Command(f.app)
	cmd.Env = append(os.Environ(), "LD_PRELOAD="+f.agent, "LD_LIBRARY_PATH="+f.cudaDir,
		"GPUBPF_AGENT_SOCKET_DIR="+f.sockDir)
	cmd.Env = append(cmd.Env, env...)
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	var se testenv.LogBuffer
	cmd.Stderr = &se
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	a := &app{t: t, cmd: cmd, in: in, lines: make(chan string, 100), stderr: &se}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			a.lines <- sc.Text()
		}
		close(a.lines)
	}()
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	a.expect("READY")
	// the socket appears once the agent's listener is up
	for i := 0; i < 100; i++ {
		if _, err := os.Stat(SocketPath(cmd.Process.Pid)); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	return a
}

// startDialed starts the app (with env) and connects to its agent.
func (f fixture) startDialed(t *testing.T, env ...string) (*app, *Conn) {
	t.Helper()
	a := f.start(t, env...)
	c, err := Dial(a.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return a, c
}

func (a *app) expect(prefix string) string {
	a.t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case l, ok := <-a.lines:
			if !ok {
				a.t.Fatalf("app exited while waiting for %q; stderr: %s", prefix, a.stderr)
			}
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case <-timeout:
			a.t.Fatalf("timed out waiting for %q", prefix)
		}
	}
}

// launch asks the app to launch once and returns the function that ran.
func (a *app) launch(cmd string) string {
	a.t.Helper()
	fmt.Fprintln(a.in, cmd)
	l := a.expect("LAUNCH ")
	a.expect("DONE")
	return strings.TrimPrefix(l, "LAUNCH ")
}

func TestAgentEndToEnd(t *testing.T) {
	f := build(t)
	a := f.start(t)
	pid := a.cmd.Process.Pid

	agents, err := List("")
	if err != nil || len(agents) != 1 || agents[0].PID != pid {
		t.Fatalf("List: %v %v", agents, err)
	}
	c, err := Dial(pid)
	if err != nil {
		t.Fatal(err)
	}
	h := c.Info()
	if h.PID != uint32(pid) || h.DriverVersion != 13000 || h.PTXISAMax != 90 || !h.CUDAReady ||
		len(h.Devices) != 1 || h.Devices[0].Major != 9 || h.Devices[0].Name != "Fake GPU" {
		t.Fatalf("hello: %+v", h)
	}
	if !strings.HasSuffix(h.Exe, "/app") {
		t.Errorf("exe %q", h.Exe)
	}
	// The module loaded before we connected is announced after hello.
	select {
	case n := <-c.Notifications():
		if n.ModuleLoaded == nil || n.ModuleLoaded.ID != 1 {
			t.Fatalf("notification %+v", n)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no module-loaded notification")
	}

	inv, err := c.Inventory(true)
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.Modules) != 1 || inv.Modules[0].Format != agentproto.FormatFatbin || inv.Modules[0].Size != 48 ||
		inv.Modules[0].Kind != agentproto.LibraryData {
		t.Fatalf("modules: %+v", inv.Modules)
	}
	k := findKernel(inv, "_Z6vecAddPfi", agentproto.KindKernel)
	if k == nil || findKernel(inv, "_Z5otherv", agentproto.KindKernel) == nil {
		t.Fatalf("kernels: %+v", inv.Kernels)
	}
	img, err := c.FetchImage(1)
	if err != nil || len(img) != 48 || img[0] != 0x50 || img[3] != 0xBA || !strings.Contains(string(img), "fake fatbin") {
		t.Fatalf("image %q %v", img, err)
	}
	gl, err := c.Globals(1, OnDevice(0), "d_N", "missing")
	if err != nil || len(gl) != 2 || gl[0].Addr == 0 || gl[0].Size != 4 || gl[1].CUResult == 0 {
		t.Fatalf("globals %+v %v", gl, err)
	}

	// JIT failures come back with the log.
	_, err = c.LoadPTX(OnDevice(0), []byte("SYNTAX_ERROR"), "x")
	var ae *agentproto.Error
	if !errors.As(err, &ae) || ae.CUResult != 218 || !strings.Contains(ae.Message, "syntax error at line 1") {
		t.Fatalf("want JIT log error, got %v", err)
	}
	if _, err := c.LoadPTX(OnDevice(0), []byte(".entry a_probe ("), "not_there"); err == nil {
		t.Fatal("missing function accepted")
	}

	lr, err := c.LoadPTX(OnDevice(0), []byte(".visible .entry probe_vecAdd (\n)"), "probe_vecAdd")
	if err != nil || len(lr.Functions) != 1 || lr.Functions[0].Handle == 0 {
		t.Fatalf("load %+v %v", lr, err)
	}
	if got := a.launch("launch"); got != "_Z6vecAddPfi" {
		t.Fatalf("before activation ran %s", got)
	}
	if err := c.Activate(k.Handle, lr.CloneID, lr.Functions[0].Handle); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"launch", "launchp"} {
		if got := a.launch(cmd); got != "probe_vecAdd" {
			t.Fatalf("%s with probe active ran %s", cmd, got)
		}
	}
	// A second tool cannot take the kernel from the first.
	other, err := Dial(pid)
	if err != nil {
		t.Fatal(err)
	}
	lrOther, err := other.LoadPTX(OnDevice(0), []byte(".visible .entry probe_vecAdd (\n)"), "probe_vecAdd")
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Activate(k.Handle, lrOther.CloneID, lrOther.Functions[0].Handle); err == nil ||
		!strings.Contains(err.Error(), "kernel _Z6vecAddPfi is already instrumented by another gpubpf tool") {
		t.Fatalf("second tool's activation: want refused, got %v", err)
	}
	other.Close()
	// Its clone goes as its session ends; wait for that, or its UNLOAD line
	// would pass for this session's below.
	a.expect("UNLOAD probe_vecAdd")
	st, err := c.Stats()
	if err != nil || len(st) != 1 || st[0].Launches != 2 {
		t.Fatalf("stats %+v %v", st, err)
	}

	// Maps: device memory, a memfd shared through SCM_RIGHTS, snapshot.
	dev, err := c.Alloc(OnDevice(0), 64)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Write(OnDevice(0), dev, []byte("device bytes!")); err != nil {
		t.Fatal(err)
	}
	if b, err := c.Read(OnDevice(0), dev, 13); err != nil || string(b) != "device bytes!" {
		t.Fatalf("read %q %v", b, err)
	}
	mf := newMemfd(t, 4096)
	reg, err := c.RegisterMemfd(OnDevice(0), mf, 4096, 0)
	if err != nil || reg.DevAddr == 0 {
		t.Fatalf("register %+v %v", reg, err)
	}
	if err := c.Snapshot(OnDevice(0), dev, reg.RegionID, 100, 13, 0); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 13)
	mf.ReadAt(buf, 100)
	if string(buf) != "device bytes!" {
		t.Fatalf("memfd after snapshot: %q", buf)
	}
	if err := c.Write(OnDevice(0), dev, []byte("live")); err != nil {
		t.Fatal(err)
	}
	if err := c.Snapshot(OnDevice(0), dev, reg.RegionID, 200, 13, agentproto.SnapshotLive); err != nil {
		t.Fatal(err)
	}
	if mf.ReadAt(buf, 200); string(buf) != "livece bytes!" {
		t.Fatalf("memfd after a live snapshot: %q", buf)
	}
	if err := c.Snapshot(OnDevice(0), dev, reg.RegionID, 0, 8, 2); err == nil || !strings.Contains(err.Error(), "malformed snapshot request") {
		t.Fatalf("a snapshot with an unknown flag: %v", err)
	}
	if _, err := c.RegisterMemfd(OnDevice(0), mf, 4096, 1); err == nil {
		t.Fatal("unaligned offset accepted")
	}

	// Deactivate / reactivate, then Close -> everything restored.
	if n, err := c.Deactivate(0); err != nil || n != 1 {
		t.Fatalf("deactivate %d %v", n, err)
	}
	if got := a.launch("launch"); got != "_Z6vecAddPfi" {
		t.Fatalf("after deactivate ran %s", got)
	}
	if err := c.Activate(k.Handle, lr.CloneID, lr.Functions[0].Handle); err != nil {
		t.Fatal(err)
	}
	if got := a.launch("launch"); got != "probe_vecAdd" {
		t.Fatalf("after reactivate ran %s", got)
	}
	c.Close()
	a.expect("UNLOAD probe_vecAdd")
	if got := a.launch("launch"); got != "_Z6vecAddPfi" {
		t.Fatalf("after close ran %s", got)
	}

	// SIGKILL of an attached tool restores the original.
	exe, _ := os.Executable()
	helper := exec.Command(exe)
	helper.Env = append(os.Environ(), helperEnv+"=attach", "GPUBPF_TEST_PID="+strconv.Itoa(pid))
	hout, _ := helper.StdoutPipe()
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(hout).ReadString('\n')
	if strings.TrimSpace(line) != "ACTIVE" {
		helper.Process.Kill()
		t.Fatalf("helper: %q", line)
	}
	if got := a.launch("launch"); got != "killed_probe" {
		t.Fatalf("helper's probe not routed: %s", got)
	}
	helper.Process.Signal(syscall.SIGKILL)
	helper.Wait()
	a.expect("UNLOAD killed_probe")
	if got := a.launch("launch"); got != "_Z6vecAddPfi" {
		t.Fatalf("after SIGKILL ran %s", got)
	}

	// fork: the child drops the parent's state and serves its own socket.
	c2, err := Dial(pid)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	lr2, err := c2.LoadPTX(OnDevice(0), []byte(".entry parent_probe ("), "parent_probe")
	if err != nil {
		t.Fatal(err)
	}
	if err := c2.Activate(k.Handle, lr2.CloneID, lr2.Functions[0].Handle); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(a.in, "fork")
	childPID, done := 0, false
	for childPID == 0 || !done {
		l := a.expect("")
		switch {
		case strings.HasPrefix(l, "LAUNCH ") && l != "LAUNCH _Z6vecAddPfi":
			t.Fatalf("forked child ran %s (inherited probe)", l)
		case strings.HasPrefix(l, "CHILD "):
			childPID, _ = strconv.Atoi(strings.TrimPrefix(l, "CHILD "))
		case l == "DONE":
			done = true
		}
	}
	cc, err := Dial(childPID)
	if err != nil {
		t.Fatalf("child agent: %v", err)
	}
	if cc.Info().PID != uint32(childPID) {
		t.Fatalf("child hello %+v", cc.Info())
	}
	cc.Close()
	if got := a.launch("launch"); got != "parent_probe" {
		t.Fatalf("parent after fork ran %s", got)
	}
}

func TestPeerCredentials(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a client as another user")
	}
	f := build(t)
	a := f.start(t)
	exe, _ := os.Executable()
	// the test binary must be executable by the other user
	cp := filepath.Join(f.dir, "client.test")
	data, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cp, data, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(cp)
	cmd.Env = append(os.Environ(), helperEnv+"=dial", "GPUBPF_TEST_PID="+strconv.Itoa(a.cmd.Process.Pid))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "DIALERR") || !strings.Contains(string(out), "only root or the process's own user") {
		t.Fatalf("connection from uid 65534 not refused: %s", out)
	}
	fmt.Fprintln(a.in, "quit")
	for range a.lines {
	}
	a.cmd.Wait()
	if !a.stderr.Has("refused a control connection from uid 65534") {
		t.Fatalf("refusal not logged; stderr: %q", a.stderr.String())
	}
}

func TestDialNoAgent(t *testing.T) {
	t.Setenv("GPUBPF_AGENT_SOCKET_DIR", t.TempDir())
	_, err := Dial(os.Getpid())
	if err == nil || !strings.Contains(err.Error(), "has no gpubpf agent") || !strings.Contains(err.Error(), "LD_PRELOAD=") {
		t.Fatalf("got %v", err)
	}
	if _, err := Dial(1 << 30); err == nil || !strings.Contains(err.Error(), "no process") {
		t.Fatalf("got %v", err)
	}
}

// Before the application unloads a module (cudart does so at exit), a tool
// with state in the process is told and the application waits until the
// tool releases it: the tool's last chance to read device maps.
func TestUnloadHold(t *testing.T) {
	f := build(t)
	a := f.start(t)
	c, err := Dial(a.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	addr, err := c.Alloc(OnDevice(0), 64)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(a.in, "unload")
	id := waitUnloading(t, c)
	// The application is held: device memory is still there to read.
	if _, err := c.Read(OnDevice(0), addr, 64); err != nil {
		t.Fatalf("read during the hold: %v", err)
	}
	select {
	case l := <-a.lines:
		t.Fatalf("application went on before release: %q", l)
	case <-time.After(300 * time.Millisecond):
	}
	if err := c.ReleaseUnload(id); err != nil {
		t.Fatal(err)
	}
	if l := a.expect("UNLOADED"); l != "UNLOADED 0" {
		t.Fatalf("unload returned %q", l)
	}
}

// cudart does not unload its modules at exit, so the agent also holds the
// exiting process (an atexit handler installed at the tool's hello) for the
// tool's last look.
func TestExitHold(t *testing.T) {
	f := build(t)
	a := f.start(t)
	c, err := Dial(a.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	addr, err := c.Alloc(OnDevice(0), 64)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(a.in, "quit")
	id := waitUnloading(t, c)
	if id != math.MaxUint64 {
		t.Fatalf("exit announced as module %d, want MaxUint64", id)
	}
	if _, err := c.Read(OnDevice(0), addr, 64); err != nil {
		t.Fatalf("read during the exit hold: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- a.cmd.Wait() }()
	select {
	case <-exited:
		t.Fatal("the process exited before the tool released it")
	case <-time.After(300 * time.Millisecond):
	}
	if err := c.ReleaseUnload(id); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("exit: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the process did not exit after release")
	}
}

// waitUnloading returns the module id of the next unloading notification.
func waitUnloading(t *testing.T, c *Conn) uint64 {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case n := <-c.Notifications():
			if n.Unloading != 0 {
				return n.Unloading
			}
		case <-deadline:
			t.Fatal("no unloading notification")
		}
	}
}

// A device the application starts using is announced (hello for those in
// use already, a notification for later ones), and a tool with state in the
// process holds the application there until it is ready on that device.
func TestDeviceUsed(t *testing.T) {
	f := build(t)
	for _, tc := range []struct{ cmd, reply string }{
		{"retain1", "RETAINED 1 0"}, // cudart: the primary context
		{"create1", "CREATED 1 0"},  // the driver API: a context of its own (cuCtxCreate_v4)
	} {
		t.Run(tc.cmd, func(t *testing.T) { testDeviceUsed(t, f, tc.cmd, tc.reply) })
	}
}

func testDeviceUsed(t *testing.T, f fixture, cmd, reply string) {
	a := f.start(t, "FAKECUDA_DEVICES=2")
	c, err := DialWith(a.cmd.Process.Pid, Options{ManualDeviceReady: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if n, used := len(c.Info().Devices), c.Info().DevicesUsed; n != 2 || used != 1 {
		t.Fatalf("hello: %d devices, in use %b; want 2, 1", n, used)
	}
	if d := waitDeviceUsed(t, c); d.Ordinal != 0 || d.Major != 9 {
		t.Fatalf("first device-used note: %+v, want device 0 (sm_90)", d)
	}
	if _, err := c.Alloc(OnDevice(0), 64); err != nil { // state here: the tool is owed a hold
		t.Fatal(err)
	}
	fmt.Fprintln(a.in, cmd)
	if d := waitDeviceUsed(t, c); d.Ordinal != 1 {
		t.Fatalf("device-used note for device %d, want 1", d.Ordinal)
	}
	select {
	case l := <-a.lines:
		t.Fatalf("application went on before device-ready: %q", l)
	case <-time.After(300 * time.Millisecond):
	}
	if err := c.DeviceReady(1); err != nil {
		t.Fatal(err)
	}
	if l := a.expect(strings.Fields(reply)[0]); l != reply {
		t.Fatalf("%s: the program printed %q, want %q", cmd, l, reply)
	}
	c2, err := Dial(a.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if used := c2.Info().DevicesUsed; used != 3 {
		t.Fatalf("second hello: in use %b, want 11", used)
	}
}

// A client that sets nothing up per device answers device-used by itself:
// the program is not held for it.
func TestDeviceUsedAutoReady(t *testing.T) {
	f := build(t)
	a := f.start(t, "FAKECUDA_DEVICES=2", "GPUBPF_AGENT_HOLD_MS=600000")
	c, err := Dial(a.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Alloc(OnDevice(0), 64); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(a.in, "retain1")
	// The hold is bounded by GPUBPF_AGENT_HOLD_MS, set far out: the
	// program comes back only through the client's device-ready.
	if l := a.expect("RETAINED"); l != "RETAINED 1 0" {
		t.Fatalf("retain returned %q", l)
	}
}

func waitDeviceUsed(t *testing.T, c *Conn) agentproto.Device {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case n := <-c.Notifications():
			if n.DeviceUsed != nil {
				return *n.DeviceUsed
			}
		case <-deadline:
			t.Fatal("no device-used notification")
		}
	}
}
