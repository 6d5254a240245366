package runtime

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestStartCommandWaitsForRelease(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "ran")
	c, err := StartCommand([]string{"sh", "-c", "echo $$ > " + marker, "x"}, CommandOptions{})
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

func TestStartCommandMissing(t *testing.T) {
	_, err := StartCommand([]string{"/nonexistent/app"}, CommandOptions{})
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/app") {
		t.Fatalf("error %v does not name the command", err)
	}
}

func TestWithPreload(t *testing.T) {
	env := withPreload([]string{"A=1", "LD_PRELOAD=/x.so"}, "/agent.so")
	if env[1] != "LD_PRELOAD=/agent.so:/x.so" {
		t.Fatalf("got %v", env)
	}
	env = withPreload([]string{"A=1"}, "/agent.so")
	if env[1] != "LD_PRELOAD=/agent.so" {
		t.Fatalf("got %v", env)
	}
}
