package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gpubpf/gpubpf/internal/testenv"
)

// TestRunPIDInjects attaches `gpubpf run -p PID` to an application that was
// started without the agent and had loaded its device code (a real fatbin,
// in the .nv_fatbin section of a library it maps) and cached its driver
// entry points, as cudart does, long before: the tool loads the agent into
// it (ptrace), the agent reaches the cached launch path, learns the kernel
// at its next launch, the tool finds its code in the mapped file, and the
// launches after that run the instrumented clone. --no-inject refuses, as
// before. (The stand-in driver does not run PTX: the GPU check counts.)
func TestRunPIDInjects(t *testing.T) {
	testenv.Root(t)
	tool := gpubpfTool(t)
	a, _, sockDir := runningApp(t)
	launch := a.launch
	pid := a.app.Process.Pid
	gpubpf := func(args ...string) *exec.Cmd {
		cmd := exec.Command(tool, append([]string{"run", "-j", "-k", "_Z6vecAddPfi"}, append(args, "-p", fmt.Sprint(pid), "../../bpf/examples/counter_bpfel.o")...)...)
		cmd.Env = append(os.Environ(), "GPUBPF_AGENT_SOCKET_DIR="+sockDir)
		return cmd
	}

	t.Run("kernels -p reads the mapped files", func(t *testing.T) {
		out, err := exec.Command(tool, "kernels", "-p", fmt.Sprint(pid)).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "libkernels.so (no agent in the process)") || !strings.Contains(string(out), "vecAdd") {
			t.Fatalf("gpubpf kernels -p on a process without the agent: %v\n%s", err, out)
		}
	})

	t.Run("--no-inject refuses", func(t *testing.T) {
		var stderr bytes.Buffer
		cmd := gpubpf("--no-inject", "-d", "2")
		cmd.Stderr = &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(stderr.String(), "has no gpubpf agent") {
			t.Fatalf("exit %v, want 1 and 'has no gpubpf agent':\n%s", err, stderr.String())
		}
	})

	var stdout, stderr bytes.Buffer
	cmd := gpubpf("-d", "4")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Launch until the tool has attached, then some more.
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		launch()
		time.Sleep(100 * time.Millisecond)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("gpubpf run -p: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), fmt.Sprintf("process %d had no gpubpf agent: loaded", pid)) {
		t.Errorf("the tool did not say it loaded the agent:\n%s", stderr.String())
	}
	summary := runSummary(t, stdout.String(), stderr.String())
	if n, _ := summary["instrumented_launches"].(float64); n < 5 {
		t.Errorf("instrumented launches %v, want most of the ~30 launched after attaching; stderr:\n%s", summary["instrumented_launches"], stderr.String())
	}
	// The tool is gone: the program runs on, untouched.
	if l := launch(); l != "LAUNCH _Z6vecAddPfi" {
		t.Errorf("after the tool left the app launched %q", l)
	}
	// The agent stays: it lists the module it learnt, with its code
	// from the mapped file.
	kernels := exec.Command(tool, "kernels", "-p", fmt.Sprint(pid))
	kernels.Env = append(os.Environ(), "GPUBPF_AGENT_SOCKET_DIR="+sockDir)
	if out, err := kernels.CombinedOutput(); err != nil ||
		!strings.Contains(string(out), "(loaded before the agent)") || !strings.Contains(string(out), "vecAdd") {
		t.Errorf("gpubpf kernels -p after the injection: %v\n%s", err, out)
	}
}

// envValue is the value of NAME in env ("NAME=value" entries; the last wins).
func envValue(env []string, name string) string {
	v := ""
	for _, e := range env {
		if k, val, ok := strings.Cut(e, "="); ok && k == name {
			v = val
		}
	}
	return v
}
