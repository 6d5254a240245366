package toolkit

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

func TestExitCodes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		action func(*cli.Context) error
		args   []string
		want   int
		stderr string
	}{
		{"ok", func(*cli.Context) error { return nil }, nil, 0, ""},
		{"error", func(*cli.Context) error { return errors.New("boom") }, nil, ExitError, "t: boom"},
		{"usage error from action", func(*cli.Context) error { return Usagef("need -p") }, nil, ExitUsage, "t: need -p"},
		{"unknown flag", func(*cli.Context) error { return nil }, []string{"--nope"}, ExitUsage, "flag provided but not defined"},
		{"bad flag value", func(*cli.Context) error { return nil }, []string{"-p", "x"}, ExitUsage, "invalid value"},
		{"exit coder", func(*cli.Context) error { return cli.Exit("custom", 3) }, nil, 3, "t: custom"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			app := NewApp("t", "test", "t -p 1")
			app.Flags = CommonFlags()
			app.Action = tc.action
			var stderr bytes.Buffer
			got := RunArgs(app, append([]string{"t"}, tc.args...), &stderr)
			if got != tc.want {
				t.Fatalf("exit code %d, want %d (stderr %q)", got, tc.want, stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.stderr) {
				t.Fatalf("stderr %q does not contain %q", stderr.String(), tc.stderr)
			}
		})
	}
}

func TestNotBuiltSaysSoAndFails(t *testing.T) {
	var stderr bytes.Buffer
	code := RunArgs(NotBuilt("threadhist", "x"), []string{"threadhist", "-p", "1", "--", "./app"}, &stderr)
	if code != ExitError {
		t.Fatalf("exit code %d, want %d", code, ExitError)
	}
	if !strings.Contains(stderr.String(), "not built yet") {
		t.Fatalf("stderr %q does not say the tool is not built", stderr.String())
	}
}

func TestCommonFlagsShortForms(t *testing.T) {
	app := NewApp("t", "test", "")
	app.Flags = CommonFlags()
	var pids []int
	var kernels []string
	var js, ts bool
	app.Action = func(c *cli.Context) error {
		pids, kernels = c.IntSlice(FlagPID), c.StringSlice(FlagKernel)
		js, ts = c.Bool(FlagJSON), c.Bool(FlagTimestamp)
		return nil
	}
	if code := RunArgs(app, []string{"t", "-p", "1", "-p", "2", "-k", "vectorAdd", "-jT"}, &bytes.Buffer{}); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if len(pids) != 2 || pids[1] != 2 || len(kernels) != 1 || !js || !ts {
		t.Fatalf("parsed pids=%v kernels=%v json=%v ts=%v", pids, kernels, js, ts)
	}
}

// -h is bcc's shape: what the tool does, usage, EXAMPLES, the everyday
// flags, then the others named on a line and the man page.
func TestHelpShape(t *testing.T) {
	app := NewApp("t", "test", "t -p 4242   # trace a process")
	app.Flags = append(GPUFlags(), PromFlags()...)
	var out bytes.Buffer
	app.Writer = &out
	if code := RunArgs(app, []string{"t", "--help"}, &bytes.Buffer{}); code != 0 {
		t.Fatalf("exit %d", code)
	}
	s := out.String()
	order := []string{"t - test\n", "USAGE: t [FLAGS]", "EXAMPLES:\n   t -p 4242   # trace a process", "FLAGS:\n   -p, --pid PID",
		"More flags: --timestamp --no-inject --device --all --otlp --prometheus --max-series", "man 8 t"}
	at := 0
	for _, w := range order {
		i := strings.Index(s[at:], w)
		if i < 0 {
			t.Fatalf("help lacks %q after byte %d:\n%s", w, at, s)
		}
		at += i + len(w)
	}
	if strings.Contains(s, "--otlp ENDPOINT") || strings.Contains(s, "--help") {
		t.Errorf("a --more flag described, or --help listed:\n%s", s)
	}
}

// A thousand SASS-only kernels make one clause with a few names, not a
// thousand-name line; other reasons keep their own words.
func TestSkippedAccount(t *testing.T) {
	skipped := map[string]string{"_Z3oddv": "the driver's JIT refused it",
		"_Z4lostv": "kernel lost is not in these fatbins (no PTX or SASS defines it)",
		"_Z4sassv": "kernel sass has only sm_90 SASS, no PTX: rebuild with -gencode arch=compute_90,code=compute_90 to trace it; the sanitizer path: GPUBPF_SANITIZER=off in the program's environment"}
	for i := range 1000 {
		skipped[fmt.Sprintf("_Z6kern%02dv", i%100)+strings.Repeat("x", i/100)] = "kernel k has only sm_90 SASS, no PTX: rebuild with -gencode arch=compute_90,code=compute_90 to trace it"
	}
	got := SkippedAccount(skipped)
	if len(got) > 700 {
		t.Fatalf("clause is %d bytes: %s", len(got), got)
	}
	for _, want := range []string{"1003 kernels skipped", "SASS only, no PTX", "more", "the driver's JIT refused it (e.g. odd)",
		"not in these fatbins (no PTX or SASS defines it) (e.g. lost)", "to trace them; the sanitizer path: GPUBPF_SANITIZER=off in the program's environment (e.g. sass)"} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in %s", want, got)
		}
	}
}
