package inject

import (
	"bufio"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpubpf/gpubpf/pkg/runtime/agentclient"
	"github.com/gpubpf/gpubpf/pkg/runtime/agentproto"
)

type target struct {
	t     *testing.T
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string
}

func gcc(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
		t.Fatalf("gcc %v: %v\n%s", args, err, out)
	}
}

// fixture builds the target program and the test library once per test.
func fixture(t *testing.T) (dir string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("injection needs root (ptrace of a process this test did not start as its tracer)")
	}
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc not found")
	}
	dir = t.TempDir()
	gcc(t, "-O2", "-pthread", "-o", filepath.Join(dir, "target"), "testdata/target.c")
	gcc(t, "-O2", "-fPIC", "-shared", "-o", filepath.Join(dir, "lib.so"), "testdata/lib.c")
	return dir
}

func start(t *testing.T, exe string, env []string, args ...string) *target {
	t.Helper()
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), env...)
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tg := &target{t: t, cmd: cmd, in: in, lines: make(chan string, 16)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			tg.lines <- sc.Text()
		}
		close(tg.lines)
	}()
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	tg.expect("READY")
	time.Sleep(50 * time.Millisecond) // let its threads get going
	return tg
}

func (tg *target) expect(prefix string) string {
	tg.t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case l, ok := <-tg.lines:
			if !ok {
				tg.t.Fatalf("target exited; wanted %q", prefix)
			}
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case <-timeout:
			tg.t.Fatalf("target said nothing in 10 s; wanted %q", prefix)
		}
	}
}

func (tg *target) say(s string) { io.WriteString(tg.in, s+"\n") }

func TestInjectLibrary(t *testing.T) {
	dir := fixture(t)
	lib := filepath.Join(dir, "lib.so")
	for _, mode := range []string{"wait", "spin", "churn"} {
		t.Run(mode, func(t *testing.T) {
			tg := start(t, filepath.Join(dir, "target"), nil, mode)
			res, err := Inject(tg.cmd.Process.Pid, lib, Options{})
			if err != nil {
				t.Fatal(err)
			}
			tg.expect("LIB LOADED")
			t.Logf("%s: thread %d stopped %v (dlopen %v), %d unsafe stops first", mode, res.Thread, res.Stopped, res.Call, res.Tries)
			if mode == "spin" && res.Thread != tg.cmd.Process.Pid {
				t.Errorf("injected in thread %d, want the spinning main thread %d (outside libc, a safe place)", res.Thread, tg.cmd.Process.Pid)
			}
			// The program goes on as before: it answers, and its
			// register-held computation never changed.
			tg.say("ping")
			tg.expect("pong")
			time.Sleep(200 * time.Millisecond)
			tg.say("check")
			if l := tg.expect(""); !strings.HasPrefix(l, "ok ") {
				t.Fatalf("after injection the target says %q: its registers were not restored", l)
			}
			again, err := Inject(tg.cmd.Process.Pid, lib, Options{})
			if err != nil || !again.AlreadyLoaded {
				t.Fatalf("second injection: %+v, %v; want AlreadyLoaded", again, err)
			}
		})
	}
}

// TestInjectAgent loads the real agent into a program started without it
// and talks to it over its socket.
func TestInjectAgent(t *testing.T) {
	dir := fixture(t)
	src, _ := filepath.Abs("../runtime/agent")
	if out, err := exec.Command("make", "-s", "-C", src, "AGENT_BIN_DIR="+dir, "CC=gcc").CombinedOutput(); err != nil {
		t.Fatalf("building the agent: %v\n%s", err, out)
	}
	sock := filepath.Join(dir, "sock")
	os.MkdirAll(sock, 0o755)
	t.Setenv("GPUBPF_AGENT_SOCKET_DIR", sock)
	tg := start(t, filepath.Join(dir, "target"), []string{"GPUBPF_AGENT_SOCKET_DIR=" + sock}, "wait")
	pid := tg.cmd.Process.Pid
	res, err := Inject(pid, filepath.Join(dir, "libgpubpf-agent.so"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("agent: thread %d stopped %v (dlopen %v)", res.Thread, res.Stopped, res.Call)
	c := dialInjected(t, pid)
	defer c.Close()
	if c.Info().PID != uint32(pid) {
		t.Errorf("agent says pid %d, want %d", c.Info().PID, pid)
	}
	tg.say("ping")
	tg.expect("pong")
}

func TestRefusesStatic(t *testing.T) {
	dir := fixture(t)
	exe := filepath.Join(dir, "static")
	if out, err := exec.Command("gcc", "-O2", "-static", "-DSTATIC_TARGET", "-o", exe, "testdata/target.c").CombinedOutput(); err != nil {
		t.Skipf("no static C library here: %v\n%s", err, out)
	}
	tg := start(t, exe, nil)
	_, err := Inject(tg.cmd.Process.Pid, filepath.Join(dir, "lib.so"), Options{})
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "statically linked") {
		t.Fatalf("got %v, want a refusal naming a statically linked program", err)
	}
}

func TestChecks(t *testing.T) {
	for _, tc := range []struct {
		name, yama, status, want string
	}{
		{"fine", "1\n", "Name:\tapp\nTracerPid:\t0\nSeccomp:\t0\n", ""},
		{"yama 3", "3\n", "TracerPid:\t0\n", "ptrace_scope = 3"},
		{"traced", "0", "TracerPid:\t4242\n", "already traced by process 4242"},
		{"seccomp filter", "0", "TracerPid:\t0\nSeccomp:\t2\n", "seccomp (mode 2)"},
		{"strict seccomp", "0", "Seccomp:\t1\n", "seccomp (mode 1)"},
		{"no seccomp line", "0", "Name:\tapp\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := yamaAllows(tc.yama)
			if err == nil {
				err = statusAllows(7, tc.status)
			}
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrUnsupported)):
				t.Fatalf("got %v, want an ErrUnsupported naming %q", err, tc.want)
			case err != nil && !strings.Contains(err.Error(), "LD_PRELOAD") && !strings.Contains(err.Error(), "detach"):
				t.Errorf("%v: says no next step", err)
			}
		})
	}
}

// TestLateInterposition injects the agent into a program that reached the
// (fake) driver as cudart does, with its entry points cached in static data
// before the agent existed: once a tool connects, the program's launches
// go through the agent, the kernel it launches is learnt at its first
// launch, and a probe activated on it runs from then on.
func TestLateInterposition(t *testing.T) {
	for _, global := range []bool{false, true} {
		name := "cudart-style"
		if global {
			name = "libcuda-in-global-scope"
		}
		t.Run(name, func(t *testing.T) { testLate(t, global) })
	}
}

func testLate(t *testing.T, global bool) {
	dir := fixture(t)
	src, _ := filepath.Abs("../runtime/agent")
	cuda := filepath.Join(dir, "cuda")
	os.MkdirAll(cuda, 0o755)
	for _, args := range [][]string{
		{"-O1", "-fPIC", "-shared", "-pthread", "-Wl,-Bsymbolic-functions", "-Wl,-soname,libcuda.so.1", "-o", filepath.Join(cuda, "libcuda.so.1"), filepath.Join(src, "testdata/fakecuda.c")},
		{"-o", filepath.Join(dir, "app"), filepath.Join(src, "testdata/app.c"), "-ldl", "-pthread"},
	} {
		gcc(t, args...)
	}
	if out, err := exec.Command("make", "-s", "-C", src, "AGENT_BIN_DIR="+dir, "CC=gcc").CombinedOutput(); err != nil {
		t.Fatalf("building the agent: %v\n%s", err, out)
	}
	sock := filepath.Join(dir, "sock")
	os.MkdirAll(sock, 0o755)
	t.Setenv("GPUBPF_AGENT_SOCKET_DIR", sock)
	env := []string{"GPUBPF_AGENT_SOCKET_DIR=" + sock, "LD_LIBRARY_PATH=" + cuda}
	if global {
		env = append(env, "APP_CUDA_GLOBAL=1")
	}
	tg := start(t, filepath.Join(dir, "app"), env)
	pid := tg.cmd.Process.Pid
	launch := func() string {
		t.Helper()
		tg.say("launch")
		l := tg.expect("LAUNCH ")
		tg.expect("DONE")
		return strings.TrimPrefix(l, "LAUNCH ")
	}
	if got := launch(); got != "_Z6vecAddPfi" {
		t.Fatalf("before injection the app launched %q", got)
	}
	tg.say("modload")
	tg.expect("MODLOADED 0")
	tg.expect("DONE")
	// a CUDA graph made, instantiated and its graph destroyed before the
	// agent came, as an inference server does at start-up
	tg.say("gmade")
	tg.expect("EXEC 0")
	tg.expect("DONE")
	if _, err := Inject(pid, filepath.Join(dir, "libgpubpf-agent.so"), Options{}); err != nil {
		t.Fatal(err)
	}
	c := dialInjected(t, pid)
	defer c.Close()
	// The module was loaded before the agent: nothing is known of it
	// until its kernel is launched.
	if got := launch(); got != "_Z6vecAddPfi" {
		t.Fatalf("first launch after injection ran %q", got)
	}
	inv, err := c.Inventory(true)
	if err != nil {
		t.Fatal(err)
	}
	var k *agentproto.Kernel
	for i := range inv.Kernels {
		if inv.Kernels[i].Name == "_Z6vecAddPfi" && inv.Kernels[i].Kind == agentproto.KindKernel {
			k = &inv.Kernels[i]
		}
	}
	if k == nil {
		t.Fatalf("the launched kernel was not learnt: inventory %+v", inv)
	}
	lr, err := c.LoadPTX(agentclient.OnDevice(0), []byte(".entry probe_vecAdd ("), "probe_vecAdd")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Activate(k.Handle, lr.CloneID, lr.Functions[0].Handle); err != nil {
		t.Fatal(err)
	}
	if got := launch(); got != "probe_vecAdd" {
		t.Fatalf("with the probe active the app launched %q, want probe_vecAdd: its cached cuLaunchKernel was not swapped", got)
	}
	// The graph made before the agent runs its original nodes (nothing
	// returns an executable graph's nodes); its launch is counted and the
	// tool told why.
	tg.say("glast")
	if l := tg.expect("GRAPHRUN "); !strings.HasSuffix(l, " _Z6vecAddPfi") {
		t.Fatalf("the graph made before the agent ran %q", l)
	}
	tg.expect("DONE")
	awaitNote(t, c, "graphs", func(n agentclient.Notification) bool { return n.Graphs })
	execs, err := c.Graphs()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, x := range execs {
		if x.Exec != 0 && x.Launches == 1 {
			found = x.Why == agentproto.GraphBeforeAgent && x.KernelNodes == agentproto.GraphNodesUnknown &&
				strings.Contains(x.WhyText, "LD_PRELOAD")
		}
	}
	if !found {
		t.Fatalf("graphs: %+v, want one exec launched once, made before the agent", execs)
	}
	// A CUDA runtime that starts after the attach (a shared library's
	// static cudart) keeps driver pointers of its own: the agent's rescan
	// finds them, tells the tool where, and reaches its launches from then.
	tg.say("rtinit")
	tg.expect("RTINIT 1")
	tg.expect("DONE")
	n := awaitNote(t, c, "late tables", func(n agentclient.Notification) bool { return n.LateTables != nil })
	if n.LateTables.Count != 1 || filepath.Base(n.LateTables.Object) != "app" {
		t.Fatalf("after the late runtime started: %+v, want 1 driver pointer in app", *n.LateTables)
	}
	tg.say("rtlaunch")
	if l := tg.expect("LAUNCH "); l != "LAUNCH probe_vecAdd" {
		t.Fatalf("the late runtime's launch ran %q after the rescan, want probe_vecAdd", l)
	}
	tg.expect("DONE")
	// A module loaded before the agent (modload, below), whose kernel the
	// program looks up after it came: the tools hear of the module with
	// the kernel's name in the inventory, so they can say what they cannot
	// instrument.
	tg.say("modget")
	tg.expect("MODGOT 0")
	tg.expect("DONE")
	n = awaitNote(t, c, "module-loaded of the module loaded before the agent", func(n agentclient.Notification) bool {
		return n.ModuleLoaded != nil && n.ModuleLoaded.Kind == agentproto.ModuleData
	})
	if inv, err := c.Inventory(false); err != nil || !slices.ContainsFunc(inv.Kernels, func(k agentproto.Kernel) bool {
		return k.ModuleID == n.ModuleLoaded.ID && k.Name == "_Z6modKerv"
	}) {
		t.Fatalf("module %d, loaded before the agent: its kernel _Z6modKerv is not in the inventory (%v)", n.ModuleLoaded.ID, err)
	}
	// The tool leaves: the program's pointers are its own again.
	c.Close()
	time.Sleep(300 * time.Millisecond)
	if got := launch(); got != "_Z6vecAddPfi" {
		t.Fatalf("after the tool left the app launched %q", got)
	}
}

// awaitNote waits for the agent's notification that ok accepts, passing
// over others. How soon it comes is not asserted (the rescans come every
// 2 s at most, later on a busy machine): only one that never comes fails,
// after a minute.
func awaitNote(t *testing.T, c *agentclient.Conn, what string, ok func(agentclient.Notification) bool) agentclient.Notification {
	t.Helper()
	deadline := time.After(time.Minute)
	for {
		select {
		case n := <-c.Notifications():
			if ok(n) {
				return n
			}
		case <-deadline:
			t.Fatalf("no %s notification", what)
		}
	}
}

// dialInjected connects to the agent just loaded into pid (its listener
// comes up in the library's constructor, on its own thread).
func dialInjected(t *testing.T, pid int) *agentclient.Conn {
	t.Helper()
	var err error
	for i := 0; i < 200; i++ {
		var c *agentclient.Conn
		if c, err = agentclient.Dial(pid); err == nil {
			return c
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no agent socket after injection: %v", err)
	return nil
}
