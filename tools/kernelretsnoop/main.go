// Package kernelretsnoop is the kernelretsnoop tool of the gpubpf binary:
// when each GPU thread exits, relative to its warp and its launch,
// aggregated on the GPU; with --events, every exit.
package kernelretsnoop

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"sync"

	"github.com/urfave/cli/v2"

	"github.com/gpubpf/gpubpf/pkg/runtime"
	"github.com/gpubpf/gpubpf/pkg/toolkit"
)

const examples = `
kernelretsnoop -- ./app                # per-lane exit lateness of every kernel
kernelretsnoop -k laneSlow -- ./lane_slow
kernelretsnoop -p 4242 -d 5            # a running process for five seconds
kernelretsnoop --events -- ./app       # one line per thread exit`

// App is the kernelretsnoop command (run by the gpubpf binary under its name, or as
// gpubpf kernelretsnoop).
func App() *cli.App {
	app := toolkit.NewApp("kernelretsnoop", "GPU thread exit times: per-lane lateness and exit spread, aggregated on the GPU", examples)
	app.ArgsUsage = "[-- CMD [ARGS...]]"
	app.Flags = append(append(append(toolkit.GPUFlags(), toolkit.PromFlags()...), toolkit.RingFlags()...), toolkit.PerDeviceFlag(),
		&cli.BoolFlag{Name: "events", Usage: "also print every thread exit (Thread (x, y, z) timestamp: N)"},
	)
	app.Description = `Every exit of every instrumented kernel (also predicated and early returns)
reads %globaltimer. Per kernel it shows how long after the launch's first exit
threads exit (the exit spread) and, per lane 0-31, the median and p99 of the
lane's exit minus its warp's first exit; lanes that finish late are marked.
With -j: {"type":"kernel","kernel","mangled","exits","spread_p50_ns",
"spread_p99_ns","spread_max_ns","lanes":[{"lane","exits","p50_ns","p99_ns",
"late"}]} per kernel and interval; with --events also {"type":"exit",...}.`
	app.Action = run
	return app
}

func run(c *cli.Context) error {
	const kernels = 16
	spec, err := loadKernelretsnoop()
	if err != nil {
		return fmt.Errorf("loading kernelretsnoop's BPF object: %w", err)
	}
	events := c.Bool("events")
	ev := uint32(0)
	if events {
		ev = 1
	}
	if err := toolkit.SetVariables(spec, map[string]any{"max_kernels": uint32(kernels), "events": ev}); err != nil {
		return err
	}
	spec.Maps["lanehist"].MaxEntries = kernels * 32 * toolkit.LinLogBuckets
	spec.Maps["spreadhist"].MaxEntries = kernels * shards * toolkit.LinLogBuckets
	r := &reporter{perDevice: c.Bool(toolkit.FlagPerDevice)}
	t := toolkit.GPUTool{
		Name:    "kernelretsnoop",
		Spec:    spec,
		What:    "Tracing GPU thread exits",
		Maps:    []string{"lanehist", "spreadhist", "lost"},
		Report:  r.report,
		Account: r.account,
		Metrics: r.metrics,
	}
	if events {
		p := &eventPrinter{w: bufio.NewWriterSize(os.Stdout, 1<<20), json: c.Bool(toolkit.FlagJSON)}
		t.Batch = p.batch
		r.events = p
	}
	return toolkit.RunGPU(c, t)
}

// eventPrinter prints --events lines as bpftime's kernelretsnoop does.
type eventPrinter struct {
	mu   sync.Mutex
	w    *bufio.Writer
	json bool
	bad  uint64
	n    uint64
}

func (p *eventPrinter) batch(b *runtime.Batch) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var buf []byte
	for i := 0; i < b.Len(); i++ {
		e, err := toolkit.DecodeThreadEvent(b.Record(i))
		if err != nil {
			p.bad++
			continue
		}
		p.n++
		if p.json {
			buf = fmt.Appendf(buf, `{"type":"exit","pid":%d,"device":%d,"kernel_index":%d,"grid":%d,"block":[%d,%d,%d],"thread":[%d,%d,%d],"sm":%d,"warp":%d,"lane":%d,"timestamp":%d}`+"\n",
				b.PID, b.Device, e.Kernel, e.Grid, e.BlockX, e.BlockY, e.BlockZ, e.ThreadX, e.ThreadY, e.ThreadZ, e.SM, e.Warp, e.Lane, e.TS)
		} else {
			buf = append(buf, "Thread ("...)
			buf = strconv.AppendUint(buf, uint64(e.ThreadX), 10)
			buf = append(buf, ", "...)
			buf = strconv.AppendUint(buf, uint64(e.ThreadY), 10)
			buf = append(buf, ", "...)
			buf = strconv.AppendUint(buf, uint64(e.ThreadZ), 10)
			buf = append(buf, ") timestamp: "...)
			buf = strconv.AppendUint(buf, e.TS, 10)
			buf = fmt.Appendf(buf, "  block (%d, %d, %d) lane %d\n", e.BlockX, e.BlockY, e.BlockZ, e.Lane)
		}
		if len(buf) > 1<<20 {
			p.w.Write(buf)
			buf = buf[:0]
		}
	}
	p.w.Write(buf)
	p.w.Flush()
}
