// Package threadhist is the threadhist tool of the gpubpf binary: how often
// each GPU thread runs and how long it is busy, counted on the GPU, to find
// the threads that do more (or less) work than the others.
package threadhist

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/gpubpf/gpubpf/pkg/toolkit"
)

const examples = `
threadhist -- ./app                    # every kernel of ./app, by threadIdx.x
threadhist --by global -- ./imbalance  # one line per global thread id
threadhist -k vectorAdd -i 1 -p 4242   # a running process, print every second
threadhist --by warp -j -- ./app       # JSON lines, one object per kernel`

// App is the threadhist command (run by the gpubpf binary under its name, or as
// gpubpf threadhist).
func App() *cli.App {
	app := toolkit.NewApp("threadhist", "per-thread run counts and busy time of GPU kernels, counted on the GPU", examples)
	app.ArgsUsage = "[-- CMD [ARGS...]]"
	app.Flags = append(append(toolkit.GPUFlags(), toolkit.PromFlags()...), toolkit.PerDeviceFlag(),
		&cli.StringFlag{Name: "by", Value: "thread.x", Usage: "key threads by `KEY`: thread.x (threadIdx.x, summed over blocks), global (global thread id), block, warp (global warp id)"},
		&cli.UintFlag{Name: "max-keys", Usage: "table size per kernel in `KEYS` (default: 1024 for thread.x, 1M for global, 64K for block, 256K for warp); keys beyond are counted as lost", Action: toolkit.UintRange("max-keys", 0, 1<<26)},
		&cli.UintFlag{Name: "top", Value: 5, Usage: "show the `N` busiest and idlest keys", Action: toolkit.UintRange("top", 1, 1<<20)},
	)
	app.Description = `Counts, for every thread key of every instrumented kernel, the runs (kernel
exits) and the nanoseconds from the thread's entry to its exit. Prints per
kernel the busiest and idlest keys, a log2 histogram of busy time per key and
an imbalance line. With -j: one {"type":"kernel",...} object per kernel and
interval (fields: time, kernel, mangled, by, keys, runs, busy_ns, busy_min_ns,
busy_mean_ns, busy_max_ns, max_over_mean, below_80pct, runs_min, runs_max,
busiest, idlest), then {"type":"summary",...}.`
	app.Action = run
	return app
}

func run(c *cli.Context) error {
	by, err := parseBy(c.String("by"))
	if err != nil {
		return err
	}
	keys := uint32(c.Uint("max-keys"))
	if keys == 0 {
		keys = by.defaultKeys
	}
	// thread.x has few keys that every block adds to: spread them over
	// copies by SM (summed here) so no address takes every block's atomic.
	shards := uint32(1)
	if by.name == "thread.x" && keys <= 1024 {
		shards = 16
	}
	kernels := uint32(64)
	if kernels*shards*keys > 1<<24 {
		kernels = max(1, (1<<24)/(shards*keys))
	}
	spec, err := loadThreadhist()
	if err != nil {
		return fmt.Errorf("loading threadhist's BPF object: %w", err)
	}
	if err := toolkit.SetVariables(spec, map[string]any{"by": by.code, "keys": keys, "max_kernels": kernels, "shards": shards}); err != nil {
		return err
	}
	spec.Maps["runs"].MaxEntries = kernels * shards * keys
	spec.Maps["nsecs"].MaxEntries = kernels * shards * keys
	r := &reporter{by: by, keys: keys, kernels: kernels, shards: shards, top: int(c.Uint("top")), perDevice: c.Bool(toolkit.FlagPerDevice)}
	return toolkit.RunGPU(c, toolkit.GPUTool{
		Name:    "threadhist",
		Spec:    spec,
		What:    "Counting GPU thread runs by " + by.name,
		Maps:    []string{"runs", "nsecs", "lost"},
		Report:  r.report,
		Account: r.account,
		Metrics: r.metrics,
	})
}
