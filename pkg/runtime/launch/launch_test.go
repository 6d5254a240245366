package launch

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestStartWaitsForRelease(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "ran")
	c, err := Start([]string{"sh", "-c", "echo $$ > " + marker, "x"}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("command ran before Release")
	}
	if err := c.Wait(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(marker)
	if err != nil {
		t.Fatal(err)
	}
	// exec keeps the PID: what the tool attached to is what ran.
	if got := strings.TrimSpace(string(b)); got != strconv.Itoa(c.PID()) {
		t.Fatalf("command ran as pid %s, StartCommand reported %d", got, c.PID())
	}
}

func TestStartMissing(t *testing.T) {
	_, err := Start([]string{"/nonexistent/app"}, Options{})
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/app") {
		t.Fatalf("error %v does not name the command", err)
	}
}

// The agent must be preloaded into CMD only, not into the waiting shell
// (which would otherwise serve the agent socket under the same PID), and
// ahead of whatever LD_PRELOAD the user had.
func TestStartPreloadsOnlyTheCommand(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "env")
	t.Setenv("LD_PRELOAD", "")
	c, err := Start([]string{"sh", "-c", `echo "$LD_PRELOAD|$GPUBPF_PRELOAD|$GPUBPF_AGENT_HOLD" > ` + out}, Options{Agent: true, Hold: true, AgentLib: "/dev/null"})
	if err != nil {
		t.Fatal(err)
	}
	// Before release the gate shell has no LD_PRELOAD.
	env, err := os.ReadFile("/proc/" + strconv.Itoa(c.PID()) + "/environ")
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range strings.Split(string(env), "\x00") {
		if strings.HasPrefix(kv, "LD_PRELOAD=/") {
			t.Fatalf("the waiting shell has %s", kv)
		}
	}
	if err := c.Wait(); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(out)
	if got := strings.TrimSpace(string(b)); got != "/dev/null||1" {
		t.Fatalf("command saw LD_PRELOAD|GPUBPF_PRELOAD|GPUBPF_AGENT_HOLD = %q, want %q", got, "/dev/null||1")
	}
}

// The command waits at the gate only while the tool is there: a tool that
// dies (or fails) before Release leaves it running, untraced, not stuck.
func TestStartRunsWhenToolGoesAway(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "ran")
	c, err := Start([]string{"sh", "-c", "echo ran > " + marker, "x"}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	c.release.Close() // what the tool's death does to the gate's pipe
	c.release = nil
	done := make(chan error, 1)
	go func() { done <- c.Cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		c.Cmd.Process.Kill()
		t.Fatal("the command is still held at the gate")
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatal("the command did not run")
	}
}
