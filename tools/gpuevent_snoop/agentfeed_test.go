package gpuevent_snoop

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpubpf/gpubpf/internal/testenv"
)

// A -p process with the gpubpf agent: its launches come from the agent's
// launch events (no probe hit), each with its result and duration, named
// from the agent's inventory, in launch order; the account says so.
// Against the agent's stand-in driver and its test program, which reaches
// the driver as cudart does (cuGetProcAddress).
func TestLaunchesFromAgent(t *testing.T) {
	build(t)
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	rig := testenv.BuildStandIn(t, dir)
	sock := filepath.Join(dir, "sock")
	os.MkdirAll(sock, 0o755)
	env := append(os.Environ(), "GPUBPF_AGENT_SOCKET_DIR="+sock)
	app := exec.Command(rig.App)
	app.Env = append(env, "LD_PRELOAD="+rig.Agent, "LD_LIBRARY_PATH="+rig.CUDADir)
	stdin, _ := app.StdinPipe()
	stdout, _ := app.StdoutPipe()
	if err := app.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { app.Process.Kill(); app.Wait() }()
	pid := app.Process.Pid
	appOut := bufio.NewScanner(stdout)
	expect := func(prefix string) {
		t.Helper()
		for appOut.Scan() {
			if strings.HasPrefix(appOut.Text(), prefix) {
				return
			}
		}
		t.Fatalf("app: no %q line", prefix)
	}
	expect("READY")
	for i := 0; i < 200; i++ {
		if _, err := os.Stat(filepath.Join(sock, fmt.Sprintf("%d.sock", pid))); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}

	trace := func(extra ...string) (launches []record, account record, errb []byte) {
		t.Helper()
		tool, out, errr, _ := startTool(t, env, append([]string{"-j", "-p", fmt.Sprint(pid), "-d", "2"}, extra...)...)
		for _, cmd := range []string{"launch", "launch", "launchp"} {
			fmt.Fprintln(stdin, cmd)
			expect("DONE")
		}
		errb, _ = io.ReadAll(errr)
		if err := tool.Wait(); err != nil {
			t.Fatalf("tool: %v\n%s", err, errb)
		}
		for _, r := range parseJSONLines(t, out.Bytes()) {
			switch r.str("type") {
			case "launch":
				launches = append(launches, r)
			case "account":
				account = r
			}
		}
		return launches, account, errb
	}

	// --no-agent: the same launches from uprobes, each a probe hit.
	launches, account, errb := trace("--no-agent")
	if len(launches) != 3 || account.num("launches_from_agent") != 0 || account.num("launch_probe_hits") < 3 {
		t.Fatalf("--no-agent: %d launches, account %v:\n%s", len(launches), account, errb)
	}

	launches, account, errb = trace()
	if len(launches) != 3 {
		t.Fatalf("%d launch events, want 3: %v\n%s", len(launches), launches, errb)
	}
	for i, l := range launches {
		wantAPI := "cuLaunchKernel"
		if i == 2 {
			wantAPI = "cuLaunchKernel_ptsz"
		}
		if l.str("api") != wantAPI || l.str("kernel_mangled") != "_Z6vecAddPfi" || l.str("error") != "" ||
			l["dur_ns"] == nil || int(l.num("pid")) != pid {
			t.Errorf("launch %d: %v (want %s of _Z6vecAddPfi, checked, with a duration)", i, l, wantAPI)
		}
	}
	if account.num("launches_from_agent") != 3 || account.num("launch_probe_hits") != 0 || account.num("launches_lost_agent") != 0 {
		t.Errorf("account %v: want 3 launches from the agent and no launch probe hit", account)
	}
	if !strings.Contains(string(errb), "launches from the gpubpf agent in 1 of 1 processes (3, no probe hit)") {
		t.Errorf("account line does not say where the launches came from:\n%s", errb)
	}
}
