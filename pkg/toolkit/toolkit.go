// Package toolkit holds what every gpubpf command shares: the common flags of
// CLI.md, exit codes, the privilege check and the --help layout, so that the
// five tools behave alike and none of them re-implements it.
package toolkit

import (
	"errors"
	"fmt"
	"github.com/gpubpf/gpubpf/pkg/promexport"
	"io"
	"os"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"
)

// Version is stamped by the Makefile (-ldflags -X).
var Version = "dev"

func init() {
	// -v is --verbose in every bcc tool; urfave/cli would take it for --version.
	cli.VersionFlag = &cli.BoolFlag{Name: "version", Usage: "print the version"}
}

// Exit codes of CLI.md: 1 for errors, 2 for usage errors.
const (
	ExitError = 1
	ExitUsage = 2
)

// UsageError marks a mistake in how the tool was invoked; it exits with 2.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

// Usagef returns a UsageError.
func Usagef(format string, args ...any) error {
	return &UsageError{Msg: fmt.Sprintf(format, args...)}
}

// Common flag names, identical in every tool.
const (
	FlagPID       = "pid"
	FlagKernel    = "kernel"
	FlagInterval  = "interval"
	FlagDuration  = "duration"
	FlagTimestamp = "timestamp"
	FlagJSON      = "json"
	FlagVerbose   = "verbose"
	FlagNoInject  = "no-inject"
	FlagPerDevice = "per-device"
	FlagDevice    = "device"
	FlagAll       = "all"
)

// CommonFlags returns the flags every tool accepts (CLI.md "Invocation").
func CommonFlags() []cli.Flag {
	return []cli.Flag{
		&cli.IntSliceFlag{Name: FlagPID, Aliases: []string{"p"}, Usage: "trace process `PID` (may repeat)", Action: checkPIDs},
		&cli.StringSliceFlag{Name: FlagKernel, Aliases: []string{"k"}, Usage: "only kernels matching `PATTERN` (mangled, demangled or glob; may repeat)", Action: checkPatterns},
		&cli.Float64Flag{Name: FlagInterval, Aliases: []string{"i"}, Usage: "print and reset every `SECONDS`", Action: positiveSeconds(FlagInterval)},
		&cli.Float64Flag{Name: FlagDuration, Aliases: []string{"d"}, Usage: "stop after `SECONDS`", Action: positiveSeconds(FlagDuration)},
		&cli.BoolFlag{Name: FlagTimestamp, Aliases: []string{"T"}, Usage: "print HH:MM:SS on each output line"},
		&cli.BoolFlag{Name: FlagJSON, Aliases: []string{"j"}, Usage: "one JSON object per line, no decoration"},
		&cli.BoolFlag{Name: FlagVerbose, Aliases: []string{"v"}, Usage: "say more about what the tool does"},
	}
}

// GPUFlags are CommonFlags plus what tools with GPU probes add: a running
// process (-p) started without the agent gets it loaded unless
// --no-inject.
func GPUFlags() []cli.Flag {
	return append(CommonFlags(),
		&cli.BoolFlag{Name: FlagNoInject, Usage: "with -p, refuse a process started without the gpubpf agent instead of loading the agent into it (ptrace)"},
		&cli.IntSliceFlag{Name: FlagDevice, Usage: "trace only the kernels on GPU `ORDINAL` (may repeat; default: every GPU the program uses)", Action: checkDevices},
		&cli.BoolFlag{Name: FlagAll, Usage: "trace every CUDA process of this host, those running and each new one as it initialises CUDA (the agent is loaded into each, as with -p)"})
}

// Ring flags, for the tools whose GPU probes write records into a ring:
// --ring-mb sizes each ring, --no-drop makes a thread that finds the ring
// full wait for room (at most --no-drop-wait for each record) instead of
// dropping its record.
const (
	FlagRingMB     = "ring-mb"
	FlagNoDrop     = "no-drop"
	FlagNoDropWait = "no-drop-wait"
)

// RingFlags are --ring-mb, --no-drop and --no-drop-wait.
func RingFlags() []cli.Flag {
	return []cli.Flag{
		&cli.UintFlag{Name: FlagRingMB, Usage: "data size of each GPU ring buffer per device in `MiB`, a power of two (default: the map's max_entries, at least 32); a larger ring holds a longer burst of records",
			Action: func(c *cli.Context, _ uint) error { _, err := RingBytesOf(c); return err }},
		&cli.BoolFlag{Name: FlagNoDrop, Usage: "when a GPU ring is full, the kernel's threads wait for the tool to make room instead of dropping records (the kernel runs slower; the waits are counted)"},
		&cli.DurationFlag{Name: FlagNoDropWait, Value: 100 * time.Millisecond, Usage: "with --no-drop: wait at most `DURATION` for room for one record, then drop it (counted)", Action: nonNegativeDuration(FlagNoDropWait)},
	}
}

// RingBytesOf is what --ring-mb asks of runtime.Options.RingBytes (0: each
// ring's own size).
func RingBytesOf(c *cli.Context) (uint64, error) {
	mb := uint64(c.Uint(FlagRingMB))
	if mb != 0 && (mb&(mb-1) != 0 || mb > 1<<14) {
		return 0, Usagef("--ring-mb %d: want a power of two of at most 16384", mb)
	}
	return mb << 20, nil
}

// RingWaitOf is what --no-drop asks of runtime.Options.RingWait (0: drop
// at once; also for a tool without RingFlags).
func RingWaitOf(c *cli.Context) time.Duration {
	if !c.Bool(FlagNoDrop) {
		return 0
	}
	return max(c.Duration(FlagNoDropWait), time.Microsecond)
}

// DevicesOf is --device: the device ordinals to trace (nil: all).
func DevicesOf(c *cli.Context) []int { return c.IntSlice(FlagDevice) }

// Prometheus flags: --prometheus ADDR serves the tool's numbers for
// Prometheus to scrape (pkg/promexport), --max-series bounds the label
// sets of each metric.
const (
	FlagPrometheus = "prometheus"
	FlagMaxSeries  = "max-series"
	FlagOTLP       = "otlp"
)

// PromFlags are --prometheus, --otlp and --max-series.
func PromFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: FlagOTLP, Usage: "push the numbers to an OpenTelemetry collector every 10 s and at the end: `ENDPOINT` grpc://HOST:4317 (or HOST:4317) for OTLP/gRPC, http://HOST:4318 for OTLP/HTTP", Action: checkOTLP},
		&cli.StringFlag{Name: FlagPrometheus, Usage: "serve the numbers for Prometheus at `ADDR`/metrics (\":9400\", \"127.0.0.1:9400\") while tracing", Action: checkListen},
		&cli.IntFlag{Name: FlagMaxSeries, Value: 1000, Usage: "with --prometheus: at most `N` label sets per metric; more are folded into one \"other\" series, and counted", Action: atLeastOne(FlagMaxSeries)},
	}
}

// ShortName shortens a kernel's demangled name as the tables and metric
// labels show it: 48 characters at most.
func ShortName(s string) string {
	if len(s) <= 48 {
		return s
	}
	return s[:45] + "..."
}

// StartExporter starts what --prometheus and --otlp ask for (nil, nil
// when neither is given); the caller closes it at the end.
func StartExporter(c *cli.Context, tool string) (*promexport.Exporter, error) {
	addr, otlp := c.String(FlagPrometheus), c.String(FlagOTLP)
	if addr == "" && otlp == "" {
		return nil, nil
	}
	e := promexport.New(tool, c.Int(FlagMaxSeries))
	if addr != "" {
		if err := e.Serve(addr); err != nil {
			return nil, err
		}
		if !c.Bool(FlagJSON) {
			fmt.Fprintf(os.Stderr, "%s: Prometheus metrics at http://%s/metrics\n", tool, e.Addr())
		}
	}
	if otlp != "" {
		if err := e.PushOTLP(otlp, MetricsEvery, promexport.GPUAttributes()...); err != nil {
			e.Close()
			return nil, err
		}
	}
	return e, nil
}

// PerDeviceFlag is --per-device, for the tools that sum their counts over
// a process's GPUs: one summary per device instead, so the imbalance
// between GPUs shows (JSON records gain "device").
func PerDeviceFlag() cli.Flag {
	return &cli.BoolFlag{Name: FlagPerDevice, Usage: "one summary per kernel and device instead of their sum over the GPUs (a process using several)"}
}

// NewApp returns a urfave/cli app with gpubpf's conventions: version, an
// EXAMPLES section at the end of --help, and errors handled by Run.
func NewApp(name, usage, examples string) *cli.App {
	app := &cli.App{
		Name:                   name,
		Usage:                  usage,
		Version:                Version,
		UseShortOptionHandling: true,
		HideHelpCommand:        true,
		ExitErrHandler:         func(*cli.Context, error) {},
		OnUsageError: func(_ *cli.Context, err error, _ bool) error {
			return &UsageError{Msg: err.Error()}
		},
	}
	app.CustomAppHelpTemplate = appHelpTemplate
	if examples != "" {
		app.Metadata = map[string]any{"examples": indent(strings.TrimSpace(examples)) + "\n"}
	}
	return app
}

func indent(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = "   " + l
	}
	return strings.Join(lines, "\n")
}

// Run runs app with os.Args and exits with CLI.md's status codes. Errors are
// printed as one line on stderr, prefixed with the tool's name.
func Run(app *cli.App) {
	os.Exit(RunArgs(app, os.Args, os.Stderr))
}

// RunArgs is Run without the exit, for tests.
func RunArgs(app *cli.App, args []string, stderr io.Writer) int {
	if f := os.Getenv("GPUBPF_CPUPROFILE"); f != "" {
		// for the suite's developers: where a tool's own time goes on
		// the GPU machine, which has no Go to profile with
		if stop, err := startCPUProfile(f); err != nil {
			fmt.Fprintf(stderr, "%s: GPUBPF_CPUPROFILE: %v\n", app.Name, err)
		} else {
			defer stop()
		}
	}
	err := app.Run(interspersed(app, args))
	if err == nil {
		return 0
	}
	if msg := err.Error(); msg != "" { // cli.Exit("", code) passes a status on
		fmt.Fprintf(stderr, "%s: %s\n", app.Name, msg)
	}
	var ue *UsageError
	if errors.As(err, &ue) {
		return ExitUsage
	}
	var ec cli.ExitCoder
	if errors.As(err, &ec) && ec.ExitCode() != 0 {
		return ec.ExitCode()
	}
	return ExitError
}

// NotBuilt is the whole behaviour of a tool whose issue has not landed yet:
// it says so plainly and exits 1, printing no made-up output.
func NotBuilt(name, usage string) *cli.App {
	app := NewApp(name, usage, "")
	app.SkipFlagParsing = true
	app.Action = func(*cli.Context) error {
		return fmt.Errorf("not built yet: this tool is planned (see ROADMAP) but its implementation has not landed; nothing was traced")
	}
	return app
}

// RequireRoot fails with a clear message unless the process may load BPF
// programs: root, or CAP_BPF together with CAP_PERFMON and CAP_SYS_ADMIN-free
// uprobe access via CAP_PERFMON.
func RequireRoot() error {
	if os.Geteuid() == 0 {
		return nil
	}
	var hdr = unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err == nil {
		has := func(c uint) bool { return data[c/32].Effective&(1<<(c%32)) != 0 }
		if has(unix.CAP_BPF) && has(unix.CAP_PERFMON) {
			return nil
		}
	}
	return errors.New("needs root (or CAP_BPF and CAP_PERFMON) to load eBPF programs: run it with sudo")
}

func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
