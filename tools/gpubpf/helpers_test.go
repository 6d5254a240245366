package main

import (
	"bufio"
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
			{"make", "-s", "-C", agentSrc, "OUT=" + dir, "CC=" + gcc},
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

// lines delivers what r says, line by line, and keeps all of it.
type lines struct {
	mu  sync.Mutex
	all strings.Builder
	ch  chan string
}

func readLines(r io.Reader) *lines {
	l := &lines{ch: make(chan string, 1000)}
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			l.mu.Lock()
			l.all.WriteString(sc.Text() + "\n")
			l.mu.Unlock()
			select {
			case l.ch <- sc.Text():
			default:
			}
		}
		close(l.ch)
	}()
	return l
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.all.String()
}

// waitFor waits for a line containing s.
func (l *lines) waitFor(t *testing.T, s string, limit time.Duration) {
	t.Helper()
	timeout := time.After(limit)
	for {
		select {
		case line, ok := <-l.ch:
			if !ok {
				t.Fatalf("output ended before %q:\n%s", s, l)
			}
			if strings.Contains(line, s) {
				return
			}
		case <-timeout:
			t.Fatalf("no %q within %v:\n%s", s, limit, l)
		}
	}
}
