package main

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

// fatbinLibApp is the stand-in application with its device code in a
// library's .nv_fatbin section, where nvcc puts it, instead of the file it
// reads by default: what a tool attaching with -p finds in the files the
// process maps. env runs the application (GPUBPF_TEST_FATBIN_SO set).
func fatbinLibApp(t *testing.T) (appBin string, env []string) {
	t.Helper()
	gcc := testenv.Tool(t, "gcc")
	appBin, env = fakeCUDA(t)
	dir := filepath.Dir(appBin)
	asm := filepath.Join(dir, "fb.s")
	os.WriteFile(asm, []byte(fmt.Sprintf(".section .nv_fatbin,\"a\"\n.balign 8\n.globl gpubpf_test_fatbin\n.type gpubpf_test_fatbin,@object\ngpubpf_test_fatbin:\n.incbin %q\n", envValue(env, "GPUBPF_TEST_FATBIN"))), 0o644)
	fbLib := filepath.Join(dir, "libkernels.so")
	if out, err := exec.Command(gcc, "-shared", "-o", fbLib, asm).CombinedOutput(); err != nil {
		t.Fatalf("building the fatbin library: %v\n%s", err, out)
	}
	return appBin, append(env, "GPUBPF_TEST_FATBIN_SO="+fbLib)
}

// runningApp starts the fatbinLibApp without the agent (env added to its
// own) and has it launch once, long before any tool: a program to attach
// to with -p. It returns the program, its stderr and its socket directory.
func runningApp(t *testing.T, env ...string) (*appConn, *testenv.LogBuffer, string) {
	t.Helper()
	appBin, appEnv := fatbinLibApp(t)
	app := exec.Command(appBin)
	app.Env = append(appEnv, env...)
	appErr := &testenv.LogBuffer{}
	app.Stderr = appErr
	a := startApp(t, app, appErr)
	t.Cleanup(func() { app.Process.Kill(); app.Wait() })
	a.expect("READY")
	a.launch()
	return a, appErr, envValue(appEnv, "GPUBPF_AGENT_SOCKET_DIR")
}

// appConn talks to a started stand-in application: its stdin and the
// lines of its stdout.
type appConn struct {
	t     *testing.T
	app   *exec.Cmd
	in    io.Writer
	lines chan string
	err   fmt.Stringer // the application's stderr, for the failure message
}

// startApp starts app with its stdin and stdout piped (stderr to errOut).
func startApp(t *testing.T, app *exec.Cmd, errOut fmt.Stringer) *appConn {
	t.Helper()
	in, _ := app.StdinPipe()
	out, _ := app.StdoutPipe()
	if err := app.Start(); err != nil {
		t.Fatal(err)
	}
	a := &appConn{t: t, app: app, in: in, lines: make(chan string, 64), err: errOut}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			a.lines <- sc.Text()
		}
		close(a.lines)
	}()
	return a
}

// expect waits (10 s at most) for a line starting with prefix.
func (a *appConn) expect(prefix string) string {
	a.t.Helper()
	for {
		select {
		case l, ok := <-a.lines:
			if !ok {
				a.app.Wait()
				a.t.Fatalf("app exited (%v), wanted %q; stderr:\n%s", a.app.ProcessState, prefix, a.err)
			}
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case <-time.After(10 * time.Second):
			a.t.Fatalf("app said nothing in 10 s, wanted %q", prefix)
		}
	}
}

// launch makes the application launch once; it returns the LAUNCH line.
func (a *appConn) launch() string {
	a.t.Helper()
	io.WriteString(a.in, "launch\n")
	l := a.expect("LAUNCH ")
	a.expect("DONE")
	return l
}
