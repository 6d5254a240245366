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
		if code != 0 || !strings.HasPrefix(want, name+" - ") {
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
		if !strings.Contains(top, "\n   "+name+" ") {
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

// Values out of range are usage errors (status 2) naming the flag, before
// anything starts, in every tool (issue 57's list).
func TestBadValues(t *testing.T) {
	bin := gpubpfTool(t)
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"threadhist", "--max-keys", "4294967297"}, "--max-keys 4294967297: want 0 to 67108864"},
		{[]string{"threadhist", "--top", "0"}, "--top 0"},
		{[]string{"threadhist", "--device", "-1"}, "--device -1"},
		{[]string{"kernel_trace", "--max-events", "-5"}, "--max-events -5"},
		{[]string{"kernel_trace", "--no-drop-wait", "-1s"}, "--no-drop-wait -1s"},
		{[]string{"kernelretsnoop", "-k", "["}, `--kernel "["`},
		{[]string{"launchlate", "--timing", "foo"}, `--timing "foo"`},
		{[]string{"launchlate", "--otlp", "notaurl"}, "--otlp notaurl"},
		{[]string{"gpuevent_snoop", "--ring-mb", "3"}, "--ring-mb 3"},
		{[]string{"gpuevent_snoop", "-p", "0"}, "--pid 0: want a process id"},
		{[]string{"gpuevent_snoop", "-d", "-1"}, "--duration -1"},
		{[]string{"run", "--direct", "-i", "-1", "x.o"}, "--interval -1"},
		{[]string{"ptx", "--sm", "sm_1", "x.o"}, "--sm sm_1"},
		{[]string{"run", "--device", "99", "x.o"}, "--device 99"},
		// --all is read by run as by the tools (it was ignored)
		{[]string{"run", "--all", "-p", "1", "../../bpf/examples/counter_bpfel.o"}, "--all traces every CUDA process of the host"},
	} {
		out, err := exec.Command(bin, c.args...).CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), c.says) {
			t.Errorf("gpubpf %v: %v, want status 2 saying %q; got:\n%s", c.args, err, c.says, out)
		}
	}
}

// -h is bcc-sized for every tool and command: at most 40 lines of at most
// 100 columns, with EXAMPLES and the pointer to the man page, which has
// every flag (hidden ones aside) and the examples.
func TestHelpSize(t *testing.T) {
	bin := gpubpfTool(t)
	cmds := [][]string{{"--help"}}
	for name := range tools {
		cmds = append(cmds, []string{name, "--help"})
	}
	for _, c := range newApp().VisibleCommands() {
		if tools[c.Name] == nil {
			cmds = append(cmds, []string{c.Name, "--help"})
		}
	}
	for _, args := range cmds {
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("gpubpf %v: %v", args, err)
		}
		lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
		if len(lines) > 40 {
			t.Errorf("gpubpf %v: %d lines of help, want at most 40", args, len(lines))
		}
		for _, l := range lines {
			if len(l) > 100 {
				t.Errorf("gpubpf %v: a help line of %d columns (at most 100): %q", args, len(l), l)
			}
		}
		if !strings.Contains(string(out), "man 8 ") {
			t.Errorf("gpubpf %v: the help does not point at the man page:\n%s", args, out)
		}
		if args[0] != "agent-path" && !strings.Contains(string(out), "EXAMPLES:") {
			t.Errorf("gpubpf %v: no EXAMPLES:\n%s", args, out)
		}
	}
	dir := t.TempDir()
	if out, err := exec.Command(bin, "man", dir).CombinedOutput(); err != nil {
		t.Fatalf("gpubpf man: %v\n%s", err, out)
	}
	for name, mk := range tools {
		page, err := os.ReadFile(filepath.Join(dir, name+".8"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range mk().VisibleFlags() {
			if n := "--" + f.Names()[0]; !strings.Contains(string(page), n+"]") && !strings.Contains(string(page), n+"|") {
				t.Errorf("%s.8 lacks --%s", name, f.Names()[0])
			}
		}
		if !strings.Contains(string(page), "EXAMPLES") {
			t.Errorf("%s.8 has no EXAMPLES", name)
		}
	}
}

// The completion scripts parse and know every name; bash's offers a
// tool's flags after -.
func TestCompletion(t *testing.T) {
	bin := gpubpfTool(t)
	for _, sh := range []string{"bash", "zsh", "fish"} {
		out, err := exec.Command(bin, "completion", sh).CombinedOutput()
		if err != nil {
			t.Fatalf("completion %s: %v\n%s", sh, err, out)
		}
		for name := range tools {
			if !strings.Contains(string(out), name) {
				t.Errorf("completion %s does not name %s", sh, name)
			}
		}
		if sh == "bash" {
			script := filepath.Join(t.TempDir(), "c.bash")
			os.WriteFile(script, out, 0o644)
			got, err := exec.Command("bash", "-c", `source `+script+`; COMP_WORDS=(launchlate --ti); COMP_CWORD=1; _gpubpf_complete; echo "${COMPREPLY[@]}"`).CombinedOutput()
			if err != nil || strings.TrimSpace(string(got)) != "--timestamp --timing" {
				t.Errorf("bash completion of launchlate --ti: %q %v", got, err)
			}
		}
	}
	if _, err := exec.Command(bin, "completion", "tcsh").CombinedOutput(); err == nil {
		t.Error("completion tcsh accepted")
	}
}
