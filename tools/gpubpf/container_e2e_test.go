package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpubpf/gpubpf/internal/testenv"
)

// TestRunPIDInContainer attaches `gpubpf run -p HOSTPID` to a program in
// namespaces of its own, as in a container: its own PID namespace (it is
// PID 1 there), mount namespace (its own /run, and the tool's directory,
// where the agent library is, hidden) and, in the second case, network
// namespace with a read-only /run. The tool copies the agent into the
// program's filesystem to load it, and reaches its socket where the
// program sees it: /run/gpubpf/1.sock through /proc/PID/root, or the
// abstract @gpubpf/1 from inside its network namespace.
func TestRunPIDInContainer(t *testing.T) {
	testenv.Root(t)
	unshare := testenv.Tool(t, "unshare")
	tool := gpubpfTool(t)
	appBin, env := fatbinLibApp(t)
	// the program's environment: no socket directory of the tool's
	var appEnv []string
	for _, e := range env {
		if !strings.HasPrefix(e, "GPUBPF_AGENT_SOCKET_DIR=") {
			appEnv = append(appEnv, e)
		}
	}
	appEnv = append(appEnv, "GPUBPF_AGENT_DEBUG=1")
	if out, err := exec.Command(unshare, "-m", "-p", "-f", "true").CombinedOutput(); err != nil {
		t.Skipf("no namespaces here (unshare -m -p -f: %v %s)", err, out)
	}

	for _, tc := range []struct {
		name, unshare, run, socket string
	}{
		{"own /run", "-m -p -f --kill-child --mount-proc", "mount -t tmpfs none /run", "/run/gpubpf/1.sock"},
		{"read-only /run, own network", "-m -p -n -f --kill-child --mount-proc", "mount -t tmpfs -o ro none /run", "abstract socket @gpubpf/<pid>"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			script := fmt.Sprintf("%s && mount -t tmpfs none %s && exec %s", tc.run, filepath.Dir(tool), appBin)
			app := exec.Command(unshare, append(strings.Fields(tc.unshare), "sh", "-c", script)...)
			app.Env = appEnv
			var appErr testenv.LogBuffer
			app.Stderr = &appErr
			a := startApp(t, app, &appErr)
			t.Cleanup(func() {
				// the program is PID 1 of its namespace: killing it ends
				// the namespace; unshare then exits
				if pid := childOf(t, app.Process.Pid); pid > 0 {
					syscall.Kill(pid, syscall.SIGKILL)
				}
				app.Process.Kill()
				app.Wait()
			})
			expect, launch := a.expect, a.launch
			expect("READY")
			launch()
			pid := childOf(t, app.Process.Pid)
			if pid == 0 {
				t.Fatalf("unshare (pid %d) has no child", app.Process.Pid)
			}

			var stdout, stderr bytes.Buffer
			cmd := exec.Command(tool, "run", "-j", "-k", "_Z6vecAddPfi", "-d", "4", "-p", strconv.Itoa(pid), "../../bpf/examples/counter_bpfel.o")
			cmd.Env = env // the tool's own socket directory: the program's is elsewhere
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); {
				launch()
				time.Sleep(100 * time.Millisecond)
			}
			if err := cmd.Wait(); err != nil {
				t.Fatalf("gpubpf run -p %d: %v\n%s", pid, err, stderr.String())
			}
			if !strings.Contains(stderr.String(), fmt.Sprintf("process %d had no gpubpf agent: loaded a copy of libgpubpf-agent.so into it (/tmp/gpubpf-agent-", pid)) {
				t.Errorf("the tool did not load a copy of the agent:\n%s", stderr.String())
			}
			summary := runSummary(t, stdout.String(), stderr.String())
			if n, _ := summary["instrumented_launches"].(float64); n < 5 {
				t.Errorf("instrumented launches %v, want most of the ~30 after the attach; stderr:\n%s\napp:\n%s", summary["instrumented_launches"], stderr.String(), appErr.String())
			}
			if !appErr.Has("serving " + tc.socket) {
				t.Errorf("the agent does not say it serves %s:\n%s", tc.socket, appErr.String())
			}
			// the copy is gone from the program's /tmp; the program runs on
			if m, _ := filepath.Glob("/tmp/gpubpf-agent-*.so"); len(m) > 0 {
				t.Errorf("the agent's copy was left behind: %v", m)
			}
			launch()
		})
	}
}

// childOf is the one child of pid (unshare -f's: the program).
func childOf(t *testing.T, pid int) int {
	t.Helper()
	for range 100 {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
		if f := strings.Fields(string(b)); len(f) == 1 {
			n, _ := strconv.Atoi(f[0])
			return n
		}
		time.Sleep(20 * time.Millisecond)
	}
	return 0
}
