// Package kernel_trace is the kernel_trace tool of the gpubpf binary: one
// line per GPU thread entering a kernel (capped), then a summary per launch:
// threads seen, when they started, how the blocks spread over the SMs and
// how late the last SM started.
package kernel_trace

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gpubpf/gpubpf/pkg/toolkit"
)

const examples = `
kernel_trace -- ./vec_add                 # first 32 thread lines, then per-launch summaries
kernel_trace --max-events 0 -- ./app      # summaries only
kernel_trace --block 0-0 --thread 0-31 -k vectorAdd -- ./app
kernel_trace --sample 1024 -p 4242 -d 5   # one thread in 1024 of a running process`

// App is the kernel_trace command (run by the gpubpf binary under its name, or as
// gpubpf kernel_trace).
func App() *cli.App {
	app := toolkit.NewApp("kernel_trace", "per-thread GPU kernel entry events: block, thread, SM, warp, lane, globaltimer", examples)
	app.ArgsUsage = "[-- CMD [ARGS...]]"
	app.Flags = append(append(append(toolkit.GPUFlags(), toolkit.PromFlags()...), toolkit.RingFlags()...),
		&cli.StringFlag{Name: "block", Usage: "only blocks in `RANGE` (linear block index, A-B or A)"},
		&cli.StringFlag{Name: "thread", Usage: "only threads in `RANGE` (linear index in the block, A-B or A)"},
		&cli.UintFlag{Name: "sample", Value: 1, Usage: "trace one thread in `N` (by global thread id)", Action: toolkit.UintRange("sample", 1, 1<<31)},
		&cli.Int64Flag{Name: "max-events", Value: 32, Usage: "print at most `N` thread lines (-1: all); summaries count every thread",
			Action: func(_ *cli.Context, n int64) error {
				if n < -1 {
					return toolkit.Usagef("--max-events %d: want -1 (all), 0 or more", n)
				}
				return nil
			}},
		&cli.UintFlag{Name: "launches", Value: 10, Usage: "print summaries of the last `N` launches of each kernel"},
	)
	app.Description = `Records every selected GPU thread's entry (or its call of a stub hook:
__bpftime_cuda__kernel_trace() or __gpubpf_hook_NAME(), docs/tools/threadhist.md) in a GPU
ring buffer. Prints the seed's lines ([kernel_trace] ts=... block=(x,y,z)
thread=(x,y,z)) up to --max-events, then per launch: threads seen, first and
last start, start spread, blocks per SM and how late the last SM started.
With -j: {"type":"thread",...} lines and {"type":"launch",...} summaries.`
	app.Action = run
	return app
}

// parseRange reads "A-B" or "A" (inclusive).
func parseRange(flag, s string) (lo, hi uint64, err error) {
	if s == "" {
		return 0, math.MaxUint64, nil
	}
	a, b, found := strings.Cut(s, "-")
	lo, err1 := strconv.ParseUint(strings.TrimSpace(a), 10, 64)
	hi = lo
	var err2 error
	if found {
		hi, err2 = strconv.ParseUint(strings.TrimSpace(b), 10, 64)
	}
	if err1 != nil || err2 != nil || hi < lo {
		return 0, 0, toolkit.Usagef("--%s %q: want A-B or A, with A <= B", flag, s)
	}
	return lo, hi, nil
}

func run(c *cli.Context) error {
	bmin, bmax, err := parseRange("block", c.String("block"))
	if err != nil {
		return err
	}
	tmin, tmax, err := parseRange("thread", c.String("thread"))
	if err != nil {
		return err
	}
	sample := uint64(c.Uint("sample"))
	if sample == 0 {
		return toolkit.Usagef("--sample 0: want one thread in N, N >= 1")
	}
	spec, err := loadKerneltrace()
	if err != nil {
		return fmt.Errorf("loading kernel_trace's BPF object: %w", err)
	}
	if err := toolkit.SetVariables(spec, map[string]any{"block_min": bmin, "block_max": bmax, "thread_min": tmin, "thread_max": tmax, "sample_every": sample}); err != nil {
		return err
	}
	tr := newTracer(bufio.NewWriterSize(os.Stdout, 1<<20), c.Bool(toolkit.FlagJSON), c.Bool(toolkit.FlagTimestamp), c.Int64("max-events"), int(c.Uint("launches")))
	tr.sample = sample
	return toolkit.RunGPU(c, toolkit.GPUTool{
		Name:    "kernel_trace",
		Spec:    spec,
		What:    "Tracing GPU thread entries",
		Batch:   tr.batch,
		Report:  tr.report,
		Account: tr.account,
		Metrics: tr.metrics,
	})
}
