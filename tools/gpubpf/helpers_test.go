package main

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpubpf/gpubpf/internal/testenv"
)

// Built once per test binary: the gpubpf command with the agent next to it,
// as make install puts them.
var (
	toolOnce sync.Once
	toolDir  string
	toolBin  string
	toolErr  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if toolDir != "" {
		os.RemoveAll(toolDir)
	}
	os.Exit(code)
}

// gpubpfTool returns the path of a gpubpf binary built from this package.
func gpubpfTool(t *testing.T) string {
	t.Helper()
	gcc := testenv.Tool(t, "gcc")
	toolOnce.Do(func() {
		dir, err := os.MkdirTemp("", "gpubpf-tool")
		if err != nil {
			toolErr = err.Error()
			return
		}
		toolDir = dir
		agentSrc, _ := filepath.Abs("../../pkg/runtime/agent")
		for _, step := range [][]string{
			{"make", "-s", "-C", agentSrc, "AGENT_BIN_DIR=" + dir, "CC=" + gcc},
			{"go", "build", "-o", filepath.Join(dir, "gpubpf"), "."},
		} {
			if out, err := exec.Command(step[0], step[1:]...).CombinedOutput(); err != nil {
				toolErr = strings.Join(step, " ") + ": " + err.Error() + "\n" + string(out)
				return
			}
		}
		toolBin = filepath.Join(dir, "gpubpf")
	})
	if toolErr != "" {
		t.Fatal(toolErr)
	}
	return toolBin
}

// bpfObject compiles testdata/cases.bpf.c with -D for each define.
func bpfObject(t *testing.T, defines ...string) string {
	t.Helper()
	clang := testenv.Tool(t, "clang")
	out := filepath.Join(t.TempDir(), strings.ToLower(strings.Join(append([]string{"cases"}, defines...), "_"))+".bpf.o")
	args := []string{"-O2", "-g", "-target", "bpf", "-I../../bpf", "-I../../bpf/include"}
	for _, d := range defines {
		args = append(args, "-D"+d)
	}
	args = append(args, "-c", "testdata/cases.bpf.c", "-o", out)
	if b, err := exec.Command(clang, args...).CombinedOutput(); err != nil {
		t.Fatalf("clang %v: %v\n%s", args, err, b)
	}
	return out
}

// cProgram compiles a C program with gcc.
func cProgram(t *testing.T, name, src string, flags ...string) string {
	t.Helper()
	gcc := testenv.Tool(t, "gcc")
	dir := t.TempDir()
	c := filepath.Join(dir, name+".c")
	if err := os.WriteFile(c, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, name)
	args := append([]string{"-O1", "-o", bin, c}, flags...)
	if out, err := exec.Command(gcc, args...).CombinedOutput(); err != nil {
		t.Fatalf("gcc %v: %v\n%s", args, err, out)
	}
	return bin
}

// outputs starts cmd with its stdin, stdout and stderr on pipes of our own:
// a traced program that outlives the tool keeps using them, and Wait
// neither waits for it nor closes them (as it does with the pipes exec.Cmd
// makes).
func outputs(t *testing.T, cmd *exec.Cmd) (stdin io.WriteCloser, stdout, stderr *lines) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	cmd.Stdin, stdin = r, w
	ends := []*os.File{r}
	pipe := func() (*os.File, *lines) {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		ends = append(ends, w)
		t.Cleanup(func() { r.Close() })
		return w, readLines(r)
	}
	cmd.Stdout, stdout = pipe()
	cmd.Stderr, stderr = pipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for _, f := range ends {
		f.Close()
	}
	return stdin, stdout, stderr
}

// lines keeps what r says.
type lines struct {
	mu   sync.Mutex
	all  strings.Builder
	done chan struct{}
}

func readLines(r io.Reader) *lines {
	l := &lines{done: make(chan struct{})}
	go func() {
		defer close(l.done)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			l.mu.Lock()
			l.all.WriteString(sc.Text() + "\n")
			l.mu.Unlock()
		}
	}()
	return l
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.all.String()
}

// waitFor waits until the output contains s.
func (l *lines) waitFor(t *testing.T, s string, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !strings.Contains(l.String(), s) {
		select {
		case <-l.done:
			if !strings.Contains(l.String(), s) {
				t.Fatalf("output ended before %q:\n%s", s, l)
			}
			return
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q within %v:\n%s", s, limit, l)
		}
	}
}

// end waits for the writers to close the output.
func (l *lines) end(t *testing.T, limit time.Duration) {
	t.Helper()
	select {
	case <-l.done:
	case <-time.After(limit):
		t.Fatalf("output still open after %v:\n%s", limit, l)
	}
}

// runSummary is the last {"type":"summary"} object of gpubpf run -j's
// output; it fails the test when there is none.
func runSummary(t *testing.T, stdout, stderr string) map[string]any {
	t.Helper()
	var summary map[string]any
	for _, line := range strings.Split(stdout, "\n") {
		var o map[string]any
		if json.Unmarshal([]byte(line), &o) == nil && o["type"] == "summary" {
			summary = o
		}
	}
	if summary == nil {
		t.Fatalf("no summary:\n%s\n%s", stdout, stderr)
	}
	return summary
}
