package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// One binary, every tool: under a link's name, as a subcommand and through
// gpubpf help, the same tool, with its own help, flags and exit status.
func TestMultiCall(t *testing.T) {
	bin := gpubpfTool(t)
	links := t.TempDir()
	for name := range tools {
		if err := os.Symlink(bin, filepath.Join(links, name)); err != nil {
			t.Fatal(err)
		}
	}
	run := func(exe string, args ...string) (string, int) {
		t.Helper()
		out, err := exec.Command(exe, args...).CombinedOutput()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return string(out), ee.ExitCode()
		} else if err != nil {
			t.Fatalf("%s %v: %v", exe, args, err)
		}
		return string(out), 0
	}
	for name := range tools {
		link := filepath.Join(links, name)
		want, code := run(link, "--help")
		if code != 0 || !strings.Contains(want, "NAME:\n   "+name+" - ") {
			t.Fatalf("%s --help (a link): status %d\n%s", name, code, want)
		}
		for _, args := range [][]string{{name, "--help"}, {"help", name}} {
			if got, code := run(bin, args...); code != 0 || got != want {
				t.Errorf("gpubpf %v: status %d, help differs from the link's:\n%s", args, code, got)
			}
		}
		// a usage error is the tool's, with the tool's status, both ways
		out1, c1 := run(link, "--no-such-flag")
		out2, c2 := run(bin, name, "--no-such-flag")
		if c1 != 2 || c2 != 2 || !strings.Contains(out1, name+":") || out1 != out2 {
			t.Errorf("%s --no-such-flag: status %d (link) and %d (subcommand), want 2; outputs:\n%s\n%s", name, c1, c2, out1, out2)
		}
	}
	top, code := run(bin, "--help")
	if code != 0 {
		t.Fatalf("gpubpf --help: status %d", code)
	}
	if got, code := run(bin, "help"); code != 0 || got != top {
		t.Errorf("gpubpf help: status %d, not gpubpf --help:\n%s", code, got)
	}
	want, _ := run(bin, "run", "--help")
	if got, code := run(bin, "help", "run"); code != 0 || got != want || !strings.Contains(got, "gpubpf run") {
		t.Errorf("gpubpf help run: status %d, not gpubpf run --help:\n%s", code, got)
	}
	if out, code := run(bin, "nosuch"); code != 2 || !strings.Contains(out, `no command "nosuch"`) {
		t.Errorf("gpubpf nosuch: status %d (want 2): %s", code, out)
	}
	for name := range tools {
		if !strings.Contains(top, "     "+name+" ") {
			t.Errorf("gpubpf --help does not list the tool %s:\n%s", name, top)
		}
	}
}

func TestToolOf(t *testing.T) {
	for _, c := range []struct {
		args     []string
		tool     string // "" none: the umbrella command
		toolArgs []string
	}{
		{[]string{"/usr/local/bin/threadhist", "-p", "1"}, "threadhist", []string{"/usr/local/bin/threadhist", "-p", "1"}},
		{[]string{"gpubpf", "launchlate", "--", "./app"}, "launchlate", []string{"launchlate", "--", "./app"}},
		{helpArgs([]string{"gpubpf", "help", "kernel_trace"}), "kernel_trace", []string{"kernel_trace", "--help"}},
		{[]string{"gpubpf", "run", "threadhist"}, "", nil}, // an argument of run, not a tool
		{helpArgs([]string{"gpubpf", "help", "run"}), "", nil},
		{[]string{"gpubpf"}, "", nil},
	} {
		mk, args := tool(c.args)
		got := ""
		if mk != nil {
			got = mk().Name
		}
		if got != c.tool || strings.Join(args, " ") != strings.Join(c.toolArgs, " ") {
			t.Errorf("tool(%q) = %q %q, want %q %q", c.args, got, args, c.tool, c.toolArgs)
		}
	}
}
