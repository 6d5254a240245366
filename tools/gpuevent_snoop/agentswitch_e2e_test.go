package gpuevent_snoop

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gpubpf/gpubpf/internal/testenv"
)

// agentEnv is the tool's environment for the agent tests: agent sockets in
// a directory of the test's own (no socket left by an earlier process with
// the same PID).
func agentEnv(t *testing.T, extra ...string) []string {
	sock := t.TempDir()
	return append(append(os.Environ(), "GPUBPF_AGENT_SOCKET_DIR="+sock), extra...)
}

// agentRun is the result of a traced command.
type agentRun struct {
	launches []record
	account  record
	stderr   string
}

// traceAgentStorm runs `gpuevent_snoop -j ARGS -- agentstorm STORM...` and
// returns its launch events, account and stderr. With wait, the storm
// starts once the tool says the agent took the launches over (-v).
func traceAgentStorm(t *testing.T, env []string, args []string, wait bool, storm ...string) agentRun {
	t.Helper()
	argv := append(append([]string{"-j", "-v"}, args...), "--", filepath.Join(workDir, "agentstorm"))
	argv = append(argv, storm...)
	if wait {
		argv = append(argv, "wait")
	}
	tool := exec.Command(toolBin, argv...)
	tool.Env = env
	stdin, _ := tool.StdinPipe()
	tool.Stdout = outFile(t)
	errPipe, _ := tool.StderrPipe()
	if err := tool.Start(); err != nil {
		t.Fatal(err)
	}
	defer tool.Process.Kill()
	var errb strings.Builder
	switched := make(chan struct{})
	errDone := make(chan struct{})
	go func() {
		defer close(errDone)
		sc := bufio.NewScanner(errPipe)
		once := false
		for sc.Scan() {
			errb.WriteString(sc.Text() + "\n")
			if !once && strings.Contains(sc.Text(), "launches from its gpubpf agent from now on") {
				once = true
				close(switched)
			}
		}
	}()
	if wait {
		select {
		case <-switched:
		case <-errDone:
		case <-time.After(10 * time.Second):
			tool.Process.Kill()
			<-errDone
			t.Fatalf("the tool did not switch to the agent within 10 s:\n%s", errb.String())
		}
		io.WriteString(stdin, "go\n")
	}
	stdin.Close()
	done := make(chan error, 1)
	go func() { <-errDone; done <- tool.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("tool: %v\n%s", err, errb.String())
		}
	case <-time.After(60 * time.Second):
		tool.Process.Kill()
		t.Fatalf("the tool did not end:\n%s", errb.String())
	}
	var r agentRun
	r.stderr = errb.String()
	for _, rec := range parseJSONLines(t, readOut(t, tool.Stdout)) {
		switch rec.str("type") {
		case "launch":
			r.launches = append(r.launches, rec)
		case "account":
			r.account = rec
		}
	}
	if r.account == nil {
		t.Fatalf("no account record:\n%s", r.stderr)
	}
	return r
}

// outFile is where the tool writes its JSON: a file, not a pipe, so that a
// test process busy elsewhere never holds the tool's output up (the
// agent's ring would fill meanwhile and count lost launches).
func outFile(t *testing.T) *os.File {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "out.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func readOut(t *testing.T, w io.Writer) []byte {
	t.Helper()
	b, err := os.ReadFile(w.(*os.File).Name())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkStorm checks that a storm of n launches was reported, each once: the
// count, the kernel, and how many of each grid (the storm cycles through 1
// to 4 blocks per thread), and that the account adds up.
func checkStorm(t *testing.T, r agentRun, threads, perThread int) {
	t.Helper()
	n := threads * perThread
	grids := map[string]int{}
	for _, l := range r.launches {
		if l.str("kernel_mangled") != "_Z6vecAddPfi" || l.str("error") != "" {
			t.Fatalf("launch %v: want a successful _Z6vecAddPfi", l)
		}
		grids[fmt.Sprint(l["grid"])]++
	}
	if len(r.launches) != n {
		t.Errorf("%d launches reported (%v lost in a full agent ring), the program made %d (grids %v)\n%s",
			len(r.launches), r.account["launches_lost_agent"], n, grids, r.stderr)
	}
	for g := 1; g <= 4; g++ {
		want := threads * (perThread/4 + b2i(perThread%4 >= g))
		if got := grids[fmt.Sprintf("[%d 1 1]", g)]; got != want {
			t.Errorf("%d launches of grid %d reported, the program made %d", got, g, want)
		}
	}
	if int(r.account.num("launches")) != n {
		t.Errorf("account: %v launches, want %d", r.account["launches"], n)
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// A command started by the tool runs with the agent preloaded; once the
// agent is up and the program has loaded the driver, its launches come
// from the agent: every one reported once, with its result, named, and no
// launch probe hit after the switch.
func TestCommandLaunchesFromAgent(t *testing.T) {
	build(t)
	const threads, per = 4, 5000
	r := traceAgentStorm(t, agentEnv(t), nil, true, fmt.Sprint(threads), fmt.Sprint(per))
	checkStorm(t, r, threads, per)
	acc := r.account
	if acc.num("launches_from_agent") != threads*per || acc.num("launches_before_agent") != 0 ||
		acc.num("launch_probe_hits_after_agent") != 0 || acc.num("probe_hits_per_launch") != 0 || acc.num("launches_checked") != threads*per {
		t.Errorf("account %v: want every launch from the agent, checked, and no launch probe hit", acc)
	}
	for _, l := range r.launches {
		if l["ret"] == nil || l["dur_ns"] == nil {
			t.Fatalf("launch %v: the agent's launches come with their result and duration", l)
		}
	}
	for _, want := range []string{
		fmt.Sprintf("launches from the gpubpf agent in 1 of 1 processes (%d, no probe hit)", threads*per),
		"launches from its gpubpf agent from +",
		"(0 launch probe hits since), 0 before that from probes",
		"0.00 probe hits per launch",
	} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
}

// The switch lands in the middle of the launches: those before it come from
// the probes, those after from the agent, each reported once. Threads on
// the driver (probed there, the program names cuLaunchKernel), and a
// loop through a static cudart that reaches the driver with dlopen and
// cuGetProcAddress as CUDA 12/13's does (probed on cudaLaunchKernel).
func TestCommandAgentSwitchMidLaunches(t *testing.T) {
	build(t)
	t.Run("driver", func(t *testing.T) {
		// As many threads as CPUs at most (two on CI): more would starve
		// the tool's reader of the agent's ring, which then counts drops.
		threads, per := min(4, max(2, runtime.NumCPU())), 40000
		r := traceAgentStorm(t, agentEnv(t), nil, false, fmt.Sprint(threads), fmt.Sprint(per))
		checkStorm(t, r, threads, per)
		checkSwitchAccount(t, r, threads*per)
	})
	t.Run("runtime", func(t *testing.T) {
		const n = 200000
		tool := exec.Command(toolBin, "-j", "--", filepath.Join(workDir, "bench", "launch_heavy"), fmt.Sprint(n), "4", "quiet")
		tool.Env = agentEnv(t)
		var errb bytes.Buffer
		tool.Stdout, tool.Stderr = outFile(t), &errb
		if err := tool.Run(); err != nil {
			t.Fatalf("tool: %v\n%s", err, errb.String())
		}
		r := agentRun{stderr: errb.String()}
		for _, rec := range parseJSONLines(t, readOut(t, tool.Stdout)) {
			switch rec.str("type") {
			case "launch":
				if rec.str("kernel") != "tick(unsigned int*, int, long long)" || rec.str("api") != "cudaLaunchKernel" {
					t.Fatalf("launch %v: want cudaLaunchKernel of tick(...)", rec)
				}
				r.launches = append(r.launches, rec)
			case "account":
				r.account = rec
			}
		}
		if len(r.launches) != n+1 || r.account.num("launches") != n+1 { // and the warm-up launch
			t.Errorf("%d launches reported (account %v), the program made %d\n%s", len(r.launches), r.account, n+1, r.stderr)
		}
		checkSwitchAccount(t, r, n+1)
	})
}

// checkSwitchAccount: the launches of both sources add up to all of them,
// no launch probe was hit after the switch, and the probe hits per launch
// count every launch once.
func checkSwitchAccount(t *testing.T, r agentRun, n int) {
	t.Helper()
	acc := r.account
	before, from := int(acc.num("launches_before_agent")), int(acc.num("launches_from_agent"))
	t.Logf("%d launches from probes, then %d from the agent from +%.1f ms", before, from, acc.num("agent_from_ms"))
	if before+from != n || acc.num("launch_probe_hits_after_agent") != 0 {
		t.Errorf("account %v: %d from probes + %d from the agent, want %d, and no launch probe hit after the switch", acc, before, from, n)
	}
	if from == 0 {
		t.Errorf("the agent never took over:\n%s", r.stderr)
	}
	if want := acc.num("launch_probe_hits") / float64(n); acc.num("probe_hits_per_launch") < want-0.001 || acc.num("probe_hits_per_launch") > want+0.001 {
		t.Errorf("account %v: probe hits per launch %v, want %.3f", acc, acc["probe_hits_per_launch"], want)
	}
}

// Without the agent's launch events — the agent loaded but serving no
// socket (GPUBPF_AGENT_DISABLE), or --no-agent — every launch is probed,
// and the account says why when the agent was expected.
func TestCommandAgentUnavailable(t *testing.T) {
	build(t)
	const threads, per = 2, 3000
	r := traceAgentStorm(t, agentEnv(t, "GPUBPF_AGENT_DISABLE=1"), nil, false, fmt.Sprint(threads), fmt.Sprint(per))
	checkStorm(t, r, threads, per)
	if r.account.num("launches_from_agent") != 0 || r.account["agent_from_ms"] != nil || r.account.num("launch_probe_hits") < threads*per {
		t.Errorf("agent disabled: account %v: want every launch probed", r.account)
	}
	if !strings.Contains(r.stderr, "the gpubpf agent did not") || !strings.Contains(r.stderr, ": launches probed") {
		t.Errorf("agent disabled: the account does not say the agent did not load:\n%s", r.stderr)
	}

	r = traceAgentStorm(t, agentEnv(t), []string{"--no-agent"}, false, fmt.Sprint(threads), fmt.Sprint(per))
	checkStorm(t, r, threads, per)
	if r.account.num("launches_from_agent") != 0 || r.account["agent"] != nil || r.account.num("launch_probe_hits") < threads*per {
		t.Errorf("--no-agent: account %v: want every launch probed and no agent", r.account)
	}
	if !strings.Contains(r.stderr, "the command's launches are probed (--no-agent)") {
		t.Errorf("--no-agent: -v does not say why the agent is not preloaded:\n%s", r.stderr)
	}
}

// A program whose CUDA driver never loads (static cudart on a machine
// without one: every call fails in cudart, nothing reaches the agent) keeps
// its launch probes: the agent is only waited for until the driver is in
// the process, and each failing launch is reported.
func TestCommandAgentNoDriver(t *testing.T) {
	build(t)
	if out, _ := exec.Command("/sbin/ldconfig", "-p").Output(); bytes.Contains(out, []byte("libcuda.so.1 ")) {
		t.Skip("this machine has a CUDA driver library: the program would load it")
	}
	// The launch-rate stand-in's static cudart, alone in a directory (its
	// RUNPATH, $ORIGIN, finds no libcuda.so.1), launching once a
	// millisecond so that the agent is up well before the end.
	dir := t.TempDir()
	td, _ := filepath.Abs("testdata")
	src := filepath.Join(dir, "nodriver.c")
	os.WriteFile(src, []byte(`#include <stdlib.h>
#include <unistd.h>
#include "fakecuda.h"
void __cudaRegisterFunction(void **, const char *, char *, const char *, int, void *, void *, void *, void *, int *);
__attribute__((noinline)) void k_stub(void) __asm__("_Z1kv");
__attribute__((noinline)) void k_stub(void) {}
int main(int argc, char **argv)
{
	__cudaRegisterFunction(0, (const char *)k_stub, (char *)"_Z1kv", "_Z1kv", -1, 0, 0, 0, 0, 0);
	dim3 g = {1, 1, 1}, b = {32, 1, 1};
	for (int i = 0; i < atoi(argv[1]); i++) {
		cudaLaunchKernel((const void *)k_stub, g, b, 0, 0, 0);
		usleep(1000);
	}
	return 0;
}
`), 0o644)
	bin := filepath.Join(dir, "nodriver")
	if out, err := exec.Command(testenv.Tool(t, "gcc"), "-O2", "-o", bin, src, filepath.Join(td, "bench", "fakert.c"), "-I"+td,
		"-Wl,-rpath,$ORIGIN", "-ldl", "-lpthread").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	const n = 50
	tool := exec.Command(toolBin, "-j", "--", bin, fmt.Sprint(n))
	tool.Env = agentEnv(t)
	var errb bytes.Buffer
	tool.Stdout, tool.Stderr = outFile(t), &errb
	if err := tool.Run(); err != nil {
		t.Fatalf("tool: %v\n%s", err, errb.String())
	}
	var failed int
	for _, r := range parseJSONLines(t, readOut(t, tool.Stdout)) {
		if r.str("api") == "cudaLaunchKernel" && r.str("error") == "cudaErrorInsufficientDriver" {
			failed++
		}
	}
	if failed != n {
		t.Errorf("%d failed launches reported, the program made %d\n%s", failed, n, errb.String())
	}
	if !strings.Contains(errb.String(), "never loaded the CUDA driver") || !strings.Contains(errb.String(), ": launches probed") {
		t.Errorf("the account does not say why the agent did not take over:\n%s", errb.String())
	}
}
