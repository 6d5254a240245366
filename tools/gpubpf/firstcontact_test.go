package main

import (
	"bytes"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpubpf/gpubpf/internal/testenv"
)

// The answers a new user gets for targets that cannot be traced, from the
// real binary (agent next to it, as make install puts them): each is one
// line, exit status 1, and a target that cannot be started gets no banner.
func TestFirstContactMessages(t *testing.T) {
	gcc := testenv.Tool(t, "gcc")
	dir := t.TempDir()
	agentSrc, _ := filepath.Abs("../../pkg/runtime/agent")
	if out, err := exec.Command("make", "-s", "-C", agentSrc, "AGENT_BIN_DIR="+dir, "CC="+gcc).CombinedOutput(); err != nil {
		t.Fatalf("building the agent: %v\n%s", err, out)
	}
	tool := filepath.Join(dir, "gpubpf")
	if out, err := exec.Command("go", "build", "-o", tool, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	obj := "../../bpf/examples/counter_bpfel.o"
	for _, tc := range []struct {
		name   string
		args   []string
		want   string
		banner bool
	}{
		// Flags after the object are taken, as bcc tools take them.
		{"missing pid, flag after the object", []string{"run", obj, "-p", "999999"}, "gpubpf: no process 999999 is running: check the PID", false},
		{"missing command", []string{"run", obj, "--", "/nonexistent/cmd"}, "cannot run /nonexistent/cmd", false},
		{"not a CUDA program", []string{"run", obj, "--", "/bin/true"}, "/bin/true exited (status 0)", true},
		{"not a CUDA program, still running at attach", []string{"run", obj, "--", "/bin/sleep", "0.3"}, "/bin/sleep exited (status 0) without loading any CUDA kernel: nothing was traced", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(tool, tc.args...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 1 {
				t.Fatalf("exit: %v, want status 1\n%s", err, stderr.String())
			}
			got := stderr.String()
			if !strings.Contains(got, tc.want) {
				t.Errorf("stderr %q, want %q", got, tc.want)
			}
			if strings.Contains(got, "LD_PRELOAD=/path/to") {
				t.Errorf("advice names no real agent path: %q", got)
			}
			if banner := strings.Contains(got, "Hit Ctrl-C to end"); banner != tc.banner {
				t.Errorf("banner printed: %v, want %v:\n%s", banner, tc.banner, got)
			}
		})
	}
}
