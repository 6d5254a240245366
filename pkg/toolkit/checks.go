package toolkit

import (
	"fmt"
	"math"
	"net"
	"path"
	"strconv"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gpubpf/gpubpf/pkg/promexport"
)

// The checks of flag values, run as the flags are parsed (urfave/cli runs
// a set flag's Action before the command's): a bad value is a usage error
// (exit 2) naming the flag and what it takes, before anything starts.

func checkPIDs(_ *cli.Context, pids []int) error {
	for _, p := range pids {
		if p <= 0 {
			return Usagef("--%s %d: want a process id (a positive number)", FlagPID, p)
		}
	}
	return nil
}

func checkPatterns(_ *cli.Context, patterns []string) error {
	for _, p := range patterns {
		if _, err := path.Match(p, ""); err != nil || p == "" {
			return Usagef("--%s %q: not a kernel name or glob pattern (* ? [a-z]; a [ needs its ])", FlagKernel, p)
		}
	}
	return nil
}

// MaxDevices bounds the device ordinals --device takes (0 to MaxDevices-1):
// the agent keeps the devices in use as the bits of a 64-bit word.
const MaxDevices = 64

func checkDevices(_ *cli.Context, devs []int) error {
	for _, d := range devs {
		if d < 0 || d >= MaxDevices {
			return Usagef("--%s %d: want a GPU ordinal, 0 to %d (nvidia-smi -L lists them)", FlagDevice, d, MaxDevices-1)
		}
	}
	return nil
}

func positiveSeconds(name string) func(*cli.Context, float64) error {
	return func(_ *cli.Context, v float64) error {
		if !(v > 0) || math.IsInf(v, 0) {
			return Usagef("--%s %g: want a positive number of seconds", name, v)
		}
		return nil
	}
}

func nonNegativeDuration(name string) func(*cli.Context, time.Duration) error {
	return func(_ *cli.Context, d time.Duration) error {
		if d < 0 {
			return Usagef("--%s %v: want a duration of 0 or more (100ms, 2s)", name, d)
		}
		return nil
	}
}

func atLeastOne(name string) func(*cli.Context, int) error {
	return func(_ *cli.Context, n int) error {
		if n < 1 {
			return Usagef("--%s %d: want at least 1", name, n)
		}
		return nil
	}
}

func checkOTLP(_ *cli.Context, v string) error {
	if err := promexport.CheckOTLPEndpoint(v); err != nil {
		return Usagef("--%s %s: %v", FlagOTLP, v, err)
	}
	return nil
}

func checkListen(_ *cli.Context, v string) error {
	_, port, err := net.SplitHostPort(v)
	if n, perr := strconv.Atoi(port); err != nil || perr != nil || n < 0 || n > 65535 {
		return Usagef("--%s %s: want [HOST]:PORT, as \":9400\" or \"127.0.0.1:9400\"", FlagPrometheus, v)
	}
	return nil
}

// UintRange is the Action of a uint flag that takes min to max: checked
// before the value is cut to a smaller type.
func UintRange(name string, min, max uint64) func(*cli.Context, uint) error {
	return func(_ *cli.Context, v uint) error {
		if uint64(v) < min || uint64(v) > max {
			return Usagef("--%s %d: want %d to %d", name, v, min, max)
		}
		return nil
	}
}

// Renamed keeps an old spelling of a flag working, hidden from the help,
// with a one-line notice naming the flag that replaced it (one vocabulary:
// a flag name means the same thing in every command). proto is a flag of
// the old one's type (*cli.StringFlag or *cli.IntFlag) whose Name and
// Aliases are the old spellings.
func Renamed(proto cli.Flag, now string) cli.Flag {
	notice := func(c *cli.Context, old string) {
		fmt.Fprintf(c.App.ErrWriter, "%s: --%s is now --%s; the old name works for now\n", c.App.Name, old, now)
	}
	switch f := proto.(type) {
	case *cli.StringFlag:
		f.Hidden = true
		f.Action = func(c *cli.Context, _ string) error { notice(c, f.Name); return nil }
	case *cli.IntFlag:
		f.Hidden = true
		f.Action = func(c *cli.Context, _ int) error { notice(c, f.Name); return nil }
	default:
		panic(fmt.Sprintf("toolkit.Renamed: a %T", proto))
	}
	return proto
}
