package toolkit

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gpubpf/gpubpf/pkg/runtime"
)

// The steps every tracing tool takes around runtime.Session.Trace, as
// CLI.md describes them: RunGPU, launchlate and gpubpf run share them.

// TargetsOf reads what to trace from -p and command (what follows --),
// refusing contradictory flags (their values were checked as they were
// parsed: checks.go), and checks that the targets can
// be traced before any banner is printed (runtime.Targets.Check).
func TargetsOf(c *cli.Context, command []string) (runtime.Targets, error) {
	t := runtime.Targets{PIDs: c.IntSlice(FlagPID), Command: command, CUDA: c.Bool(FlagAll)}
	if len(t.Command) > 0 && len(t.PIDs) > 0 {
		return t, Usagef("give either -p PID or -- CMD, not both")
	}
	if t.CUDA && (len(t.Command) > 0 || len(t.PIDs) > 0) {
		return t, Usagef("--all traces every CUDA process of the host: drop -p or -- CMD, or drop --all")
	}
	return t, t.Check()
}

// KernelPatterns is -k, or every kernel when it is not given.
func KernelPatterns(c *cli.Context) []string {
	if k := c.StringSlice(FlagKernel); len(k) > 0 {
		return k
	}
	return []string{"*"}
}

// KernelsWhat names the kernels traced, for the start line.
func KernelsWhat(c *cli.Context) string {
	if k := c.StringSlice(FlagKernel); len(k) > 0 {
		return strings.Join(k, ", ")
	}
	return "every kernel"
}

// LogOf is where progress lines go: stderr with -v, nowhere without.
func LogOf(c *cli.Context) io.Writer {
	if c.Bool(FlagVerbose) {
		return os.Stderr
	}
	return nil
}

// WarnOf is where a tool says what the user must hear during a trace even
// without -v: stderr, each line prefixed with the tool's name.
func WarnOf(tool string) io.Writer { return &prefixWriter{prefix: tool + ": ", w: os.Stderr} }

type prefixWriter struct {
	prefix string
	w      io.Writer
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	if _, err := io.WriteString(p.w, p.prefix+string(b)); err != nil {
		return 0, err
	}
	return len(b), nil
}

// TraceContext ends at Ctrl-C, SIGTERM or after -d; its cancel also stops
// catching the signals. Once it has ended, the signals are no longer caught:
// the tool winds up in bounded time (the runtime's deadlines), and a second
// Ctrl-C ends it at once (the agents then restore the kernels by
// themselves, as when a tool is killed).
func TraceContext(c *cli.Context) (context.Context, context.CancelFunc) {
	sctx, stopSignals := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	ctx, cancel := sctx, context.CancelFunc(func() {})
	if d := c.Float64(FlagDuration); d > 0 {
		ctx, cancel = context.WithTimeout(sctx, time.Duration(d*float64(time.Second)))
	}
	go func() {
		<-ctx.Done()
		stopSignals()
	}()
	return ctx, func() { cancel(); stopSignals() }
}

// Finish is the end of a trace once the tool has printed its report and
// account: the trace's own error, then no kernel matched, then nothing to
// trace at all, a detach problem said but not failed on, and the traced
// command's exit status passed on.
func Finish(tool string, t runtime.Targets, s *runtime.Session, st runtime.Stats, code int, traceErr, closeErr error) error {
	if traceErr != nil {
		return traceErr
	}
	if err := NoKernelMatched(s, st); err != nil {
		return err
	}
	if err := NothingTraced(t, s, st, code); err != nil {
		return err
	}
	if closeErr != nil {
		fmt.Fprintf(os.Stderr, "%s: detaching: %v\n", tool, closeErr)
	}
	if code != 0 {
		return cli.Exit("", code)
	}
	return nil
}
