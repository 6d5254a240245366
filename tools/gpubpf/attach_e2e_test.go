package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpubpf/gpubpf/internal/testenv"
)

// callsTarget calls target_fn 25 times once a line arrives on stdin (the
// test sends it when the tool says its uprobes are attached).
const callsTarget = `#include <stdio.h>
__attribute__((noinline)) int target_fn(int x) { __asm__ volatile(""); return x + 1; }
int main(void) {
	char b[8];
	if (!fgets(b, sizeof b, stdin)) return 2;
	int s = 0;
	for (int i = 0; i < 25; i++) s += target_fn(i);
	printf("SUM %d\n", s);
	return 0;
}
`

// A bpftime/libbpf object whose uprobe programs sit in bare SEC("uprobe")
// and SEC("uretprobe") sections: refused before anything starts unless
// --attach names their function; with it, real uprobes on a real binary
// count every call.
func TestAttachBareUprobes(t *testing.T) {
	testenv.Root(t)
	tool := gpubpfTool(t)
	obj := bpfObject(t, "WITH_BARE")
	app := cProgram(t, "app", callsTarget)

	t.Run("refused without --attach, nothing started", func(t *testing.T) {
		marker := filepath.Join(t.TempDir(), "started")
		cmd := exec.Command(tool, "run", "-d", "5", obj, "--", "sh", "-c", "touch "+marker)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Fatalf("exit %v, want status 1\n%s", err, stderr.String())
		}
		for _, want := range []string{filepath.Base(obj), `enter (section "uprobe")`, `leave (section "uretprobe")`,
			`SEC("uprobe/libcudart.so:cudaLaunchKernel")`, "--attach NAME=SYMBOL[@PATH]"} {
			if !strings.Contains(stderr.String(), want) {
				t.Errorf("message does not say %q:\n%s", want, stderr.String())
			}
		}
		if _, err := os.Stat(marker); err == nil {
			t.Error("the command was started")
		}
	})

	t.Run("--attach counts real calls", func(t *testing.T) {
		// enter on the traced executable (no @PATH), leave by absolute path.
		cmd := exec.Command(tool, "run", "-v", "--attach", "enter=target_fn", "--attach", "leave=target_fn@"+app, obj, "--", app)
		stdin, stdout, stderr := outputs(t, cmd)
		defer cmd.Process.Kill()
		stderr.waitFor(t, "2 uprobe(s) attached", 15*time.Second)
		stdin.Write([]byte("go\n"))
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("gpubpf run: %v\n%s\n%s", err, stdout, stderr)
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("gpubpf run did not end:\n%s", stderr)
		}
		stdout.end(t, 5*time.Second)
		out := stdout.String()
		if !strings.Contains(out, "SUM 325") {
			t.Errorf("the application did not run normally:\n%s", out)
		}
		if !strings.Contains(out, "hits (kernel map, kernel):\n  0: 25\n  1: 25\n") {
			t.Errorf("want 25 entries and 25 returns counted:\n%s\n%s", out, stderr)
		}
	})
}
