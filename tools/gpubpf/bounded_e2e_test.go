package main

import (
	"errors"
	"fmt"
	"io"
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

// A run ends within a bounded time however the traced program behaves, the
// program itself is released and keeps running, and the user is told why.
// Each case runs the real binary against a real program on this GPU-less
// machine.

// sleeper writes its PID to the file named by argv[1] and sleeps; built
// static, it ignores LD_PRELOAD, so its agent never comes up.
const sleeper = `#include <stdio.h>
#include <unistd.h>
int main(int argc, char **argv) {
	FILE *f = fopen(argv[1], "w");
	fprintf(f, "%d\n", (int)getpid());
	fclose(f);
	sleep(60);
	return 0;
}
`

// runUntilEnd runs a started gpubpf and fails unless it ends within limit;
// it returns the exit status.
func runUntilEnd(t *testing.T, cmd *exec.Cmd, limit time.Duration, stderr fmt.Stringer) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(limit):
		cmd.Process.Kill()
		<-done
		t.Fatalf("gpubpf still running after %v:\n%s", limit, stderr)
	}
	return -1
}

// pidIn reads the PID a sleeper wrote, waiting for it to appear.
func pidIn(t *testing.T, file string) int {
	t.Helper()
	for i := 0; i < 500; i++ {
		if b, err := os.ReadFile(file); err == nil && strings.HasSuffix(string(b), "\n") {
			pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
			return pid
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no PID in %s", file)
	return 0
}

// alive checks that the traced program outlived the tool, then ends it.
func alive(t *testing.T, pid int) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil || strings.Contains(string(b), ") Z ") {
		t.Errorf("the traced program (PID %d) did not outlive the tool", pid)
		return
	}
	syscall.Kill(pid, syscall.SIGKILL)
}

func TestRunEndsInTime(t *testing.T) {
	tool := gpubpfTool(t)
	obj := "../../bpf/examples/counter_bpfel.o"
	static := cProgram(t, "sleeper", sleeper, "-static")
	dynamic := cProgram(t, "sleeper_dyn", sleeper)

	for _, tc := range []struct {
		name   string
		prog   string
		flags  []string
		sigint bool // Ctrl-C to the tool alone once it has started
		limit  time.Duration
		want   []string
	}{
		// The agent is up but no CUDA kernel ever loads: -d ends it.
		{"-d, a command that never uses CUDA", dynamic, []string{"-d", "1"}, false, 4 * time.Second,
			[]string{"loaded no CUDA kernel before the trace ended", "runs on untraced", "attach later with -p"}},
		// The agent never answers (a static program ignores LD_PRELOAD):
		// the wait for it ends with -d, not after its own 10 s.
		{"-d while waiting for the agent", static, []string{"-d", "1"}, false, 4 * time.Second,
			[]string{"the trace ended before the gpubpf agent of process", "runs on untraced", "attach later with -p"}},
		{"Ctrl-C while waiting for the agent", static, nil, true, 4 * time.Second,
			[]string{"the trace ended before the gpubpf agent of process", "runs on untraced"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pidFile := filepath.Join(t.TempDir(), "pid")
			args := append(append([]string{"run"}, tc.flags...), obj, "--", tc.prog, pidFile)
			cmd := exec.Command(tool, args...)
			_, _, stderr := outputs(t, cmd)
			pid := pidIn(t, pidFile)
			if tc.sigint {
				stderr.waitFor(t, "Hit Ctrl-C to end", 5*time.Second)
				cmd.Process.Signal(os.Interrupt)
			}
			code := runUntilEnd(t, cmd, tc.limit, stderr)
			if code != 1 {
				t.Errorf("exit status %d, want 1:\n%s", code, stderr)
			}
			stderr.waitFor(t, tc.want[0], time.Second) // the program holds stderr open
			for _, w := range tc.want {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr does not say %q:\n%s", w, stderr)
				}
			}
			if !strings.Contains(stderr.String(), strconv.Itoa(pid)) {
				t.Errorf("stderr does not name PID %d:\n%s", pid, stderr)
			}
			alive(t, pid)
		})
	}
}

// fakeCUDA builds the agent tests' stand-in CUDA driver and application
// (pkg/runtime/agent/testdata) and a real fatbin holding testPTX; env runs
// the application against them.
func fakeCUDA(t *testing.T) (app string, env []string) {
	t.Helper()
	gcc := testenv.Tool(t, "gcc")
	fatbinary := testenv.Tool(t, "fatbinary")
	dir := t.TempDir()
	agentSrc, _ := filepath.Abs("../../pkg/runtime/agent")
	cudaDir := filepath.Join(dir, "cuda")
	os.MkdirAll(cudaDir, 0o755)
	ptxFile := filepath.Join(dir, "k.ptx")
	os.WriteFile(ptxFile, []byte(testPTX), 0o644)
	fb := filepath.Join(dir, "k.fatbin")
	app = filepath.Join(dir, "app")
	for _, step := range [][]string{
		{gcc, "-O1", "-fPIC", "-shared", "-Wl,-Bsymbolic-functions", "-Wl,-soname,libcuda.so.1", "-o", filepath.Join(cudaDir, "libcuda.so.1"), filepath.Join(agentSrc, "testdata/fakecuda.c")},
		{gcc, "-o", app, filepath.Join(agentSrc, "testdata/app.c"), "-ldl", "-pthread"},
		{fatbinary, "--create=" + fb, "--image=profile=compute_90,file=" + ptxFile},
	} {
		if out, err := exec.Command(step[0], step[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", step, err, out)
		}
	}
	sockDir := filepath.Join(dir, "sock")
	return app, append(os.Environ(), "LD_LIBRARY_PATH="+cudaDir, "GPUBPF_TEST_FATBIN="+fb, "GPUBPF_AGENT_SOCKET_DIR="+sockDir)
}

// tracedApp starts gpubpf run -v on the stand-in application and waits until
// its kernel is instrumented. The application reads its commands from in.
func tracedApp(t *testing.T, flags ...string) (cmd *exec.Cmd, in io.WriteCloser, stdout, stderr *lines, appPID int) {
	t.Helper()
	tool := gpubpfTool(t)
	app, env := fakeCUDA(t)
	args := append(append([]string{"run", "-v"}, flags...), "-k", "_Z6vecAddPfi", "../../bpf/examples/counter_bpfel.o", "--", app)
	cmd = exec.Command(tool, args...)
	cmd.Env = env
	in, stdout, stderr = outputs(t, cmd)
	t.Cleanup(func() { cmd.Process.Kill() })
	stderr.waitFor(t, "_Z6vecAddPfi instrumented", 10*time.Second)
	fmt.Fprintln(in, "launch")
	stdout.waitFor(t, "DONE", 5*time.Second)
	for _, f := range strings.Fields(stderr.String()) {
		if n, err := strconv.Atoi(strings.TrimSuffix(f, ":")); err == nil && n > 1 && strings.Contains(stderr.String(), "process "+f) {
			appPID = n
			break
		}
	}
	if appPID == 0 {
		t.Fatalf("no application PID in:\n%s", stderr)
	}
	return cmd, in, stdout, stderr, appPID
}

// The agent stops answering mid-run (its process is stopped): Ctrl-C still
// ends the tool within its wind-up bound, and the program, once it runs
// again, is untouched and finishes normally.
func TestRunStoppedAgent(t *testing.T) {
	cmd, in, stdout, stderr, pid := tracedApp(t)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(pid, syscall.SIGCONT)
	cmd.Process.Signal(os.Interrupt) // to the tool alone: the program is stopped
	// ctrlCGrace (the program's moment to exit) + windUpTime + slack.
	runUntilEnd(t, cmd, 10*time.Second, stderr)
	stderr.waitFor(t, "did not answer", time.Second)
	syscall.Kill(pid, syscall.SIGCONT)
	fmt.Fprintln(in, "launch")
	fmt.Fprintln(in, "quit")
	in.Close()
	stdout.waitFor(t, "UNLOAD", 10*time.Second) // ran on to its normal end
	for i := 0; i < 200; i++ {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Errorf("the program did not exit after quit:\n%s", stdout)
}

// The traced program dies mid-run: the tool ends at once, says the maps
// could not be read, and passes on the shell's status for the signal.
func TestRunProgramKilled(t *testing.T) {
	cmd, _, _, stderr, pid := tracedApp(t)
	syscall.Kill(pid, syscall.SIGKILL)
	code := runUntilEnd(t, cmd, 5*time.Second, stderr)
	if code != 128+int(syscall.SIGKILL) {
		t.Errorf("exit status %d, want %d (killed by SIGKILL)\n%s", code, 128+int(syscall.SIGKILL), stderr)
	}
	stderr.waitFor(t, "exited before its maps could be read", time.Second)
}

// Ctrl-C while the driver JITs a clone for minutes (a huge module): the tool
// stops waiting after its wind-up bound, not after the load's own deadline,
// and the program runs on to its normal end.
func TestRunCtrlCDuringSlowJIT(t *testing.T) {
	tool := gpubpfTool(t)
	app, env := fakeCUDA(t)
	cmd := exec.Command(tool, "run", "-v", "-k", "_Z6vecAddPfi", "../../bpf/examples/counter_bpfel.o", "--", app)
	cmd.Env = append(env, "FAKECUDA_JIT_STALL_MS=60000", "GPUBPF_AGENT_HOLD_MS=1000")
	in, stdout, stderr := outputs(t, cmd)
	t.Cleanup(func() { cmd.Process.Kill() })
	stderr.waitFor(t, "agent 0.1.0", 10*time.Second)
	time.Sleep(300 * time.Millisecond) // in the JIT by now
	t0 := time.Now()
	cmd.Process.Signal(os.Interrupt) // to the tool alone
	// windUpTime + ctrlCGrace + slack, far below LoadTimeout.
	runUntilEnd(t, cmd, 12*time.Second, stderr)
	t.Logf("ended %v after Ctrl-C", time.Since(t0).Round(time.Millisecond))
	// the load, or a request the tool sent behind it (a ring drain, on a
	// busy machine the first to time out), went unanswered: said so
	stderr.waitFor(t, "did not answer", time.Second)
	if strings.Contains(stderr.String(), "JIT refused") {
		t.Errorf("a load the agent did not answer is no verdict of the JIT's:\n%s", stderr)
	}
	fmt.Fprintln(in, "launch")
	fmt.Fprintln(in, "quit")
	stdout.waitFor(t, "LAUNCH _Z6vecAddPfi", 5*time.Second)
	stdout.end(t, 10*time.Second) // the program exited normally
}
