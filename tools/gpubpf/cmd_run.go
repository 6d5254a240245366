package main

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/urfave/cli/v2"

	"github.com/gpubpf/gpubpf/pkg/btffmt"
	"github.com/gpubpf/gpubpf/pkg/runtime"
	"github.com/gpubpf/gpubpf/pkg/runtime/fatbin"
	"github.com/gpubpf/gpubpf/pkg/runtime/gpumap"
	"github.com/gpubpf/gpubpf/pkg/runtime/instrument"
	"github.com/gpubpf/gpubpf/pkg/toolkit"
)

func init() {
	register(&cli.Command{
		Name:      "run",
		Usage:     "run a GPU eBPF object: attach every program, print records and trace_printk lines, dump maps at the end",
		ArgsUsage: "PROG.bpf.o [-- CMD [ARGS...]]",
		Description: `Programs in kprobe/KERNEL, kretprobe/KERNEL (optionally cuda_-prefixed) and
gpu/entry|exit/KERNEL sections run inside the named CUDA kernels; uprobe and
uretprobe[/PATH:SYMBOL] programs run in the Linux kernel. bpftime objects run
unchanged. With -j, output is JSON lines: {"type":"record","pid","device","map",
"data"(hex),"text"}, {"type":"printk","pid","device","text"}, {"type":"map",
"map","pid","device","key","value"} and a final {"type":"summary",...}.`,
		Flags: append(toolkit.CommonFlags(),
			&cli.StringSliceFlag{Name: "program", Aliases: []string{"P"}, Usage: "only run program `NAME` of the object (may repeat)"},
			&cli.StringFlag{Name: "record-type", Usage: "BTF struct `NAME` to print ring-buffer records as (default: the object's only struct of the record's size)"},
			&cli.UintFlag{Name: "threads", Usage: "per-GPU-thread array capacity in `THREADS` (default: as many as fit in 1 GiB, at most 1M)"},
		),
		Action: runAction,
	})
}

func runAction(c *cli.Context) error {
	args := c.Args().Slice()
	if len(args) == 0 {
		return toolkit.Usagef("run needs a BPF object: gpubpf run PROG.bpf.o [-- CMD ARGS]")
	}
	obj, cmdArgs := args[0], args[1:]
	// Flag parsing stops at PROG, so "--" is still there.
	if len(cmdArgs) > 0 {
		if cmdArgs[0] != "--" {
			return toolkit.Usagef("unexpected %q after %s: put flags before the object and the command after --", cmdArgs[0], obj)
		}
		cmdArgs = cmdArgs[1:]
		if len(cmdArgs) == 0 {
			return toolkit.Usagef("no command after --")
		}
	}
	if len(cmdArgs) > 0 && len(c.IntSlice(toolkit.FlagPID)) > 0 {
		return toolkit.Usagef("give either -p PID or -- CMD, not both")
	}
	spec, err := ebpf.LoadCollectionSpec(obj)
	if err != nil {
		return fmt.Errorf("%s is not a BPF object gpubpf can read: %w", obj, err)
	}
	var log io.Writer
	if c.Bool(toolkit.FlagVerbose) {
		log = os.Stderr
	}
	sess, err := runtime.Open(spec, runtime.Options{
		Programs: c.StringSlice("program"),
		Kernels:  c.StringSlice(toolkit.FlagKernel),
		Client:   "gpubpf run",
		Threads:  uint32(c.Uint("threads")),
		Log:      log,
	})
	if err != nil {
		return fmt.Errorf("%s: %w", obj, err)
	}
	defer sess.Close()
	if len(sess.CPUPrograms()) > 0 {
		if err := toolkit.RequireRoot(); err != nil {
			return err
		}
	}
	targets := runtime.Targets{PIDs: c.IntSlice(toolkit.FlagPID), Command: cmdArgs}
	out := &runOutput{w: os.Stdout, json: c.Bool(toolkit.FlagJSON), stamp: c.Bool(toolkit.FlagTimestamp), spec: spec, recordType: c.String("record-type")}
	if !out.json {
		fmt.Fprintf(os.Stderr, "Running %s (%s) %s... Hit Ctrl-C to end.\n", obj, describePrograms(sess, c.StringSlice(toolkit.FlagKernel)), targets.Describe())
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if d := c.Float64(toolkit.FlagDuration); d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(d*float64(time.Second)))
		defer cancel()
	}
	printerDone := make(chan struct{})
	go func() {
		defer close(printerDone)
		for r := range sess.Records() {
			out.record(r)
		}
	}()
	if iv := c.Float64(toolkit.FlagInterval); iv > 0 {
		go func() {
			t := time.NewTicker(time.Duration(iv * float64(time.Second)))
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					out.maps(sess)
				}
			}
		}()
	}
	code, traceErr := sess.Trace(ctx, targets)
	out.maps(sess)
	st := sess.Stats()
	closeErr := sess.Close()
	out.summary(st)
	if traceErr != nil {
		return traceErr
	}
	if err := noKernelMatched(sess, st); err != nil {
		return err
	}
	if closeErr != nil {
		fmt.Fprintf(os.Stderr, "gpubpf: detaching: %v\n", closeErr)
	}
	if code != 0 {
		return cli.Exit("", code)
	}
	return nil
}

func describePrograms(s *runtime.Session, retarget []string) string {
	var parts []string
	kernels := map[string]bool{}
	for _, g := range s.GPUPrograms() {
		kernels[g.Kernel] = true
	}
	if len(retarget) > 0 {
		kernels = map[string]bool{}
		for _, k := range retarget {
			kernels[k] = true
		}
	}
	if n := len(s.GPUPrograms()); n > 0 {
		ks := make([]string, 0, len(kernels))
		for k := range kernels {
			ks = append(ks, k)
		}
		sort.Strings(ks)
		parts = append(parts, fmt.Sprintf("%d GPU program(s) on %s", n, strings.Join(ks, ", ")))
	}
	if n := len(s.CPUPrograms()); n > 0 {
		parts = append(parts, fmt.Sprintf("%d CPU program(s)", n))
	}
	return strings.Join(parts, ", ")
}

type runOutput struct {
	w          io.Writer
	json       bool
	stamp      bool
	spec       *ebpf.CollectionSpec
	recordType string
	types      map[int]btf.Type // record size -> struct
}

func (o *runOutput) prefix() string {
	if o.stamp {
		return time.Now().Format("15:04:05") + " "
	}
	return ""
}

func (o *runOutput) emit(v map[string]any) {
	b, _ := json.Marshal(v)
	fmt.Fprintf(o.w, "%s\n", b)
}

// recordStruct picks the BTF struct to print records of size n as.
func (o *runOutput) recordStruct(n int) btf.Type {
	if o.types == nil {
		o.types = map[int]btf.Type{}
		count := map[int]int{}
		if o.spec.Types != nil {
			for t, err := range o.spec.Types.All() {
				if err != nil {
					break
				}
				st, ok := t.(*btf.Struct)
				if !ok || st.Name == "" {
					continue
				}
				if o.recordType != "" {
					if st.Name == o.recordType {
						o.types[int(st.Size)] = st
					}
					continue
				}
				count[int(st.Size)]++
				o.types[int(st.Size)] = st
			}
		}
		for size, c := range count {
			if c > 1 {
				delete(o.types, size) // ambiguous: print raw
			}
		}
	}
	return o.types[n]
}

func (o *runOutput) record(r runtime.Record) {
	if r.Map == "" {
		if o.json {
			o.emit(map[string]any{"type": "printk", "pid": r.PID, "device": r.Device, "text": r.Text})
		} else {
			fmt.Fprintf(o.w, "%s%-7d GPU%d  %s\n", o.prefix(), r.PID, r.Device, r.Text)
		}
		return
	}
	text := btffmt.Format(o.recordStruct(len(r.Data)), r.Data)
	if o.json {
		o.emit(map[string]any{"type": "record", "pid": r.PID, "device": r.Device, "map": r.Map, "data": hex.EncodeToString(r.Data), "text": text})
		return
	}
	fmt.Fprintf(o.w, "%s%-7d GPU%d  %s %s\n", o.prefix(), r.PID, r.Device, r.Map, text)
}

// maps prints every map's contents (non-zero entries of per-thread arrays).
func (o *runOutput) maps(s *runtime.Session) {
	copies, err := s.ReadMaps()
	if err != nil {
		fmt.Fprintf(os.Stderr, "gpubpf: %v\n", err)
	}
	for _, mc := range copies {
		var kt, vt btf.Type
		if mc.Spec != nil {
			kt, vt = mc.Spec.Key, mc.Spec.Value
		}
		where := "kernel"
		if mc.PID != 0 {
			where = fmt.Sprintf("PID %d, GPU %d", mc.PID, mc.Device)
		}
		kind := "kernel map"
		if mc.Kernel == nil {
			kind = "GPU " + mc.Kind.String()
		}
		if !o.json {
			fmt.Fprintf(o.w, "%s%s (%s, %s):\n", o.prefix(), mc.Name, kind, where)
			if mc.Errors > 0 {
				fmt.Fprintf(o.w, "  (%d %s counted on the GPU)\n", mc.Errors, errorWord(mc.Kind))
			}
		}
		n := 0
		err := mc.Entries(func(k, v []byte) bool {
			n++
			key := btffmt.Format(kt, k)
			if mc.Kind == gpumap.PerThreadArray && len(k) == 8 {
				key = fmt.Sprintf("thread %d key %s", binary.LittleEndian.Uint32(k[4:]), btffmt.Format(kt, k[:4]))
			}
			if o.json {
				o.emit(map[string]any{"type": "map", "map": mc.Name, "pid": mc.PID, "device": mc.Device, "key": key, "value": btffmt.Format(vt, v)})
			} else {
				fmt.Fprintf(o.w, "  %s: %s\n", key, btffmt.Format(vt, v))
			}
			return true
		})
		if err != nil {
			fmt.Fprintf(os.Stderr, "gpubpf: map %s: %v\n", mc.Name, err)
		}
		if n == 0 && !o.json {
			fmt.Fprintf(o.w, "  (empty)\n")
		}
	}
}

func errorWord(k gpumap.Kind) string {
	switch k {
	case gpumap.PerThreadArray:
		return "out-of-range thread ids"
	case gpumap.Hash:
		return "inserts refused by a full table"
	}
	return "errors"
}

func (o *runOutput) summary(st runtime.Stats) {
	matched := sortedSet(st.KernelsMatched)
	skipped := make([]string, 0, len(st.KernelsSkipped))
	for k, why := range st.KernelsSkipped {
		skipped = append(skipped, k+" ("+why+")")
	}
	sort.Strings(skipped)
	if o.json {
		o.emit(map[string]any{"type": "summary", "processes": st.Processes, "kernels_instrumented": matched,
			"kernels_skipped": st.KernelsSkipped, "instrumented_launches": st.Launches, "launch_failures": st.LaunchFailures,
			"records": st.Records, "records_dropped_gpu": st.RingDrops, "records_lost_tool": st.RecordsLost,
			"jit_ms": float64(st.JIT.Microseconds()) / 1000, "first_attach_ms": float64(st.FirstAttach.Microseconds()) / 1000})
		return
	}
	line := fmt.Sprintf("gpubpf: %d process(es); kernels instrumented: %s; skipped: %s; %d instrumented launches",
		st.Processes, listOrNone(matched), listOrNone(skipped), st.Launches)
	if st.LaunchFailures > 0 {
		line += fmt.Sprintf(" (%d refused by the driver, original ran)", st.LaunchFailures)
	}
	line += fmt.Sprintf("; %d records, %d dropped on the GPU (ring full), %d lost in the tool", st.Records, st.RingDrops, st.RecordsLost)
	if st.Clones > 0 {
		line += fmt.Sprintf("; JIT %.1f ms, first probe active %.0f ms after start", float64(st.JIT.Microseconds())/1000, float64(st.FirstAttach.Microseconds())/1000)
	}
	fmt.Fprintln(os.Stderr, line)
	for _, f := range st.ProbeFailures {
		fmt.Fprintln(os.Stderr, "gpubpf: "+f)
	}
}

func sortedSet(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func listOrNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// noKernelMatched is the error of CLI.md for GPU programs whose pattern
// matched none of the kernels the traced processes loaded.
func noKernelMatched(s *runtime.Session, st runtime.Stats) error {
	if len(s.GPUPrograms()) == 0 || len(st.KernelsMatched) > 0 || len(st.KernelsSkipped) > 0 || len(st.KernelsSeen) == 0 {
		return nil
	}
	seen := sortedSet(st.KernelsSeen)
	patterns := s.Patterns()
	_, closest := instrument.Match(patterns, seen)
	var names []string
	for _, k := range closest {
		base, _ := fatbin.Demangle(k)
		names = append(names, base+" ("+k+")")
	}
	msg := fmt.Sprintf("no kernel matched %s among the %d kernels the process loaded", strings.Join(patterns, ", "), len(seen))
	if len(names) > 0 {
		msg += "; closest: " + strings.Join(names, ", ")
	}
	return fmt.Errorf("%s (list them with: gpubpf kernels -p PID)", msg)
}
