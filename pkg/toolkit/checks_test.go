package toolkit

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// Every bad value of a common flag is a usage error naming the flag, as the
// flags are parsed (the command's action never runs); good ones pass.
func TestFlagChecks(t *testing.T) {
	flags := func() []cli.Flag { return append(append(GPUFlags(), RingFlags()...), PromFlags()...) }
	for _, c := range []struct {
		args []string
		err  string // "": accepted
	}{
		{[]string{"-p", "42", "-k", "vec*", "-i", "0.5", "-d", "3", "--device", "1"}, ""},
		{[]string{"-p", "0"}, "--pid 0: want a process id"},
		{[]string{"-p", "-3"}, "--pid -3"},
		{[]string{"-k", "["}, `--kernel "[": not a kernel name or glob pattern`},
		{[]string{"-k", "_Z[0-9]*"}, ""},
		{[]string{"-i", "0"}, "--interval 0: want a positive number of seconds"},
		{[]string{"-d", "-1"}, "--duration -1"},
		{[]string{"--device", "-1"}, "--device -1: want a GPU ordinal, 0 to 63"},
		{[]string{"--device", "64"}, "--device 64"},
		{[]string{"--ring-mb", "256"}, ""},
		{[]string{"--ring-mb", "3"}, "--ring-mb 3: want a power of two"},
		{[]string{"--no-drop-wait", "-1s"}, "--no-drop-wait -1s"},
		{[]string{"--no-drop-wait", "0s"}, ""},
		{[]string{"--otlp", "notaurl"}, "--otlp notaurl: want grpc://HOST:PORT"},
		{[]string{"--otlp", "ftp://h:1"}, `scheme "ftp"`},
		{[]string{"--otlp", "http://collector:4318/v1/metrics"}, ""},
		{[]string{"--otlp", "grpc://collector:4317"}, ""},
		{[]string{"--otlp", "collector:4317"}, ""},
		{[]string{"--otlp", "collector:99999"}, "--otlp collector:99999"},
		{[]string{"--prometheus", ":9400"}, ""},
		{[]string{"--prometheus", "nope"}, "--prometheus nope: want [HOST]:PORT"},
		{[]string{"--max-series", "0"}, "--max-series 0: want at least 1"},
	} {
		ran := false
		app := &cli.App{Name: "t", Flags: flags(), Action: func(*cli.Context) error { ran = true; return nil },
			ErrWriter: &bytes.Buffer{}}
		err := app.Run(append([]string{"t"}, c.args...))
		var ue *UsageError
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%v: %v, want it accepted", c.args, err)
		case c.err != "" && (!errors.As(err, &ue) || !strings.Contains(err.Error(), c.err) || ran):
			t.Errorf("%v: %v (action ran: %v), want a usage error with %q before the action", c.args, err, ran, c.err)
		}
	}
}

// An old spelling works, hidden, and says what replaced it.
func TestRenamed(t *testing.T) {
	var errw bytes.Buffer
	got := ""
	app := &cli.App{Name: "t", ErrWriter: &errw, Flags: []cli.Flag{
		&cli.StringFlag{Name: "kinds", Aliases: []string{"e"}},
		Renamed(&cli.StringFlag{Name: "events"}, "kinds"),
	}, Action: func(c *cli.Context) error { got = c.String("events"); return nil }}
	if err := app.Run([]string{"t", "--events", "launch"}); err != nil {
		t.Fatal(err)
	}
	if got != "launch" || errw.String() != "t: --events is now --kinds; the old name works for now\n" {
		t.Errorf("value %q, notice %q", got, errw.String())
	}
	var help bytes.Buffer
	app.Writer = &help
	app.Run([]string{"t", "--help"})
	if strings.Contains(help.String(), "events") {
		t.Errorf("the old name is in the help:\n%s", help.String())
	}
}
