package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/urfave/cli/v2"

	"github.com/gpubpf/gpubpf/pkg/btffmt"
	"github.com/gpubpf/gpubpf/pkg/runtime"
	"github.com/gpubpf/gpubpf/pkg/runtime/gpumap"
	"github.com/gpubpf/gpubpf/pkg/runtime/graphs"
	"github.com/gpubpf/gpubpf/pkg/runtime/jit"
	"github.com/gpubpf/gpubpf/pkg/toolkit"
)

func init() {
	register(&cli.Command{
		Name:      "run",
		Usage:     "run a GPU eBPF object against a program: its records, trace_printk lines and maps",
		ArgsUsage: "PROG.bpf.o [-- CMD [ARGS...]] | --direct PROG.bpf.o",
		CustomHelpTemplate: toolkit.CommandHelp(`sudo gpubpf run counter.bpf.o -- ./vec_add     # the object's probes in ./vec_add's kernels
sudo gpubpf run -k vectorAdd -i 1 prog.bpf.o -p 4242  # a running process, maps every second
sudo gpubpf run -P count_entry -j prog.bpf.o -- ./app  # one program of the object, JSON lines
gpubpf run --direct --threads 1048576 --map 'vec_N=[1048576]' direct.bpf.o  # kernels of its own`),
		Description: `Programs in kprobe/KERNEL, kretprobe/KERNEL (optionally cuda_-prefixed) and
gpu/entry|exit/KERNEL sections run inside the named CUDA kernels; programs in
kprobe/__memcapture (every kernel) and gpu/mem/KERNEL run after every global
load, store and atomic, with ctx -> struct gpubpf_mem_access; uprobe and
uretprobe[/PATH:SYMBOL] programs run in the Linux kernel. A program in a bare
SEC("uprobe") or SEC("uretprobe") gets its function from --attach
PROG=SYMBOL[@PATH] (PATH: absolute, or a library name such as libcudart.so;
none: the traced executable). bpftime objects run unchanged. With -j, output is JSON lines: {"type":"record","pid","device","map",
"data"(hex),"text"}, {"type":"printk","pid","device","text"}, {"type":"map",
"map","pid","device","key","value"}, {"type":"kernel_index","index","kernel","name"}
(what bpf_gpu_kernel_index's numbers stand for, when a program calls it) and a
final {"type":"summary",...}.` + directHelp,
		Flags: append(append(append(append(toolkit.GPUFlags(), toolkit.RingFlags()...), toolkit.PromFlags()...),
			&cli.StringSliceFlag{Name: "program", Aliases: []string{"P"}, Usage: "only run program `NAME` of the object (may repeat)"},
			&cli.StringFlag{Name: "record-type", Usage: "BTF struct `NAME` to print ring-buffer records as (default: the object's only struct of the record's size)"},
			&cli.UintFlag{Name: "threads", Usage: "per-GPU-thread array capacity in `THREADS` (default: as many as fit in 1 GiB, at most 1M); with --direct: run THREADS threads, a 1-D grid of ceil(THREADS/block) blocks"},
			&cli.BoolFlag{Name: "summary", Usage: "count ring-buffer records instead of printing them (maps, printk lines and the record account still print)"},
			&cli.StringSliceFlag{Name: "attach", Usage: "attach the bare uprobe/uretprobe program PROG to function SYMBOL of PATH (absolute or a library name; default: the traced executable) as `PROG=SYMBOL[@PATH]` (may repeat)"},
			&cli.Uint64Flag{Name: "loop-budget", Usage: "`N` iterations a probe's thread may run in one function call through loops whose bounds come from data (a map value); past it the call returns 0 and the kernel goes on, counted", Value: runtime.DefaultLoopBudget},
		), directFlags()...),
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
		if len(cmdArgs) == 0 && !c.Bool("direct") {
			return toolkit.Usagef("no command after --: gpubpf run %s -- CMD [ARGS...]", obj)
		}
	}
	if c.Bool("direct") {
		return runDirect(c, obj, cmdArgs)
	}
	if err := notDirect(c); err != nil {
		return err
	}
	ringBytes, err := toolkit.RingBytesOf(c)
	if err != nil {
		return err
	}
	if c.Uint64("loop-budget") == 0 {
		return toolkit.Usagef("--loop-budget 0: want at least 1 iteration")
	}
	uprobes, err := parseAttach(c.StringSlice("attach"))
	if err != nil {
		return err
	}
	spec, err := loadObject(obj)
	if err != nil {
		return err
	}
	if err := checkPrograms(c, obj, spec); err != nil {
		return err
	}
	// -p, -- CMD or --all, as in the tools (after the object: a bad one is
	// said first)
	targets, err := toolkit.TargetsOf(c, cmdArgs)
	if err != nil {
		return err
	}
	sess, err := runtime.Open(spec, runtime.Options{
		Programs:      c.StringSlice("program"),
		Kernels:       c.StringSlice(toolkit.FlagKernel),
		Client:        "gpubpf run",
		Devices:       toolkit.DevicesOf(c),
		Threads:       uint32(c.Uint("threads")),
		RingBytes:     ringBytes,
		RingWait:      toolkit.RingWaitOf(c),
		Log:           toolkit.LogOf(c),
		Warn:          toolkit.WarnOf("gpubpf"),
		UprobeTargets: uprobes,
		NoInject:      c.Bool(toolkit.FlagNoInject),
		LoopBudget:    c.Uint64("loop-budget"),
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
	if err := sess.CheckTargets(targets); err != nil {
		return err
	}
	out := newRunOutput(os.Stdout, spec, c.Bool(toolkit.FlagJSON), c.Bool(toolkit.FlagTimestamp), c.String("record-type"))
	out.countOnly = c.Bool("summary")
	if !out.json {
		fmt.Fprintf(os.Stderr, "Running %s (%s) %s... Hit Ctrl-C to end.\n", obj, describePrograms(sess, c.StringSlice(toolkit.FlagKernel)), targets.Describe())
	}

	// --prometheus, --otlp: the maps' numbers and the account, refreshed
	// every 10 s, at each -i and at the end (the last OTLP push)
	exp, err := toolkit.StartExporter(c, "run")
	if err != nil {
		return err
	}
	var rm *runMetrics
	if exp != nil {
		defer exp.Close()
		rm = newRunMetrics(exp)
	}
	export := func(copies []runtime.MapCopy) {
		if rm != nil {
			rm.update(copies, sess.Stats())
		}
	}

	ctx, stop := toolkit.TraceContext(c)
	defer stop()
	printerDone := make(chan struct{})
	batches := sess.Batches()
	go func() {
		defer close(printerDone)
		for b := range batches {
			out.batch(b)
			b.Release()
		}
	}()
	// the periodic reads end before the last one
	tctx, tstop := context.WithCancel(ctx)
	defer tstop()
	var tickDone, metricsDone <-chan struct{} // nil: no loop
	if iv := c.Float64(toolkit.FlagInterval); iv > 0 {
		tickDone = toolkit.Every(tctx, time.Duration(iv*float64(time.Second)), func() {
			export(out.maps(sess))
			out.accounting(sess.Stats())
		})
	} else if rm != nil {
		metricsDone = toolkit.Every(tctx, toolkit.MetricsEvery, func() {
			copies, _ := sess.ReadMaps()
			export(copies)
		})
	}
	code, traceErr := sess.Trace(ctx, targets)
	tstop()
	for _, done := range []<-chan struct{}{tickDone, metricsDone} {
		if done != nil {
			<-done
		}
	}
	last := out.maps(sess)
	closeErr := sess.Close() // drains the rings a last time
	<-printerDone
	st := sess.Stats()
	export(last)
	if traceErr != nil && st.Processes == 0 {
		return traceErr // nothing was traced: the error alone says what happened
	}
	out.summary(st)
	return toolkit.Finish("gpubpf", targets, sess, st, code, traceErr, closeErr)
}

// checkPrograms refuses a --program the object does not have.
func checkPrograms(c *cli.Context, obj string, spec *ebpf.CollectionSpec) error {
	for _, name := range c.StringSlice("program") {
		if spec.Programs[name] == nil {
			return toolkit.Usagef("--program %s: %s has no program %s; its programs are %s", name, obj, name,
				strings.Join(slices.Sorted(maps.Keys(spec.Programs)), ", "))
		}
	}
	return nil
}

// parseAttach reads --attach PROG=SYMBOL[@PATH] values.
func parseAttach(vals []string) (map[string]runtime.UprobeTarget, error) {
	if len(vals) == 0 {
		return nil, nil
	}
	out := map[string]runtime.UprobeTarget{}
	for _, v := range vals {
		prog, target, ok := strings.Cut(v, "=")
		sym, path, _ := strings.Cut(target, "@")
		if !ok || prog == "" || sym == "" || strings.HasSuffix(target, "@") {
			return nil, toolkit.Usagef("--attach %s: want PROG=SYMBOL or PROG=SYMBOL@PATH, e.g. --attach my_probe=cudaLaunchKernel@libcudart.so", v)
		}
		if _, dup := out[prog]; dup {
			return nil, toolkit.Usagef("--attach %s: program %s is named twice; a program attaches to one function", v, prog)
		}
		out[prog] = runtime.UprobeTarget{Symbol: sym, Path: path, Flag: v}
	}
	return out, nil
}

// describePrograms says what the session attaches, for the start line:
// "2 GPU program(s) on vectorAdd, 1 memory-access program(s) at every
// global load/store/atomic of every kernel, 1 CPU program(s)".
func describePrograms(s *runtime.Session, retarget []string) string {
	var parts []string
	onKernels := func(progs []runtime.GPUProgram) string {
		kernels := map[string]bool{}
		for _, g := range progs {
			kernels[g.Kernel] = true
		}
		if len(retarget) > 0 {
			kernels = map[string]bool{}
			for _, k := range retarget {
				kernels[k] = true
			}
		}
		return strings.Join(sortedSet(kernels), ", ")
	}
	var probes, mem []runtime.GPUProgram
	for _, g := range s.GPUPrograms() {
		if g.Site == runtime.SiteMem {
			mem = append(mem, g)
		} else {
			probes = append(probes, g)
		}
	}
	if len(probes) > 0 {
		parts = append(parts, fmt.Sprintf("%d GPU program(s) on %s", len(probes), onKernels(probes)))
	}
	if len(mem) > 0 {
		parts = append(parts, fmt.Sprintf("%d memory-access program(s) %s", len(mem), runtime.SiteMem.Where(onKernels(mem))))
	}
	if n := len(s.CPUPrograms()); n > 0 {
		parts = append(parts, fmt.Sprintf("%d CPU program(s)", n))
	}
	return strings.Join(parts, ", ")
}

type runOutput struct {
	mu         sync.Mutex // the printer and the interval ticker both write
	w          *bufio.Writer
	json       bool
	stamp      bool
	spec       *ebpf.CollectionSpec
	recordType string
	types      map[int]btf.Type // record size -> struct
	formats    map[int]*btffmt.Formatter
	buf        []byte
	countOnly  bool // --summary: records are counted (Stats), not printed
}

func newRunOutput(w io.Writer, spec *ebpf.CollectionSpec, json, stamp bool, recordType string) *runOutput {
	return &runOutput{w: bufio.NewWriterSize(w, 1<<20), json: json, stamp: stamp, spec: spec, recordType: recordType,
		formats: map[int]*btffmt.Formatter{}}
}

func (o *runOutput) prefix() string {
	if o.stamp {
		return time.Now().Format("15:04:05") + " "
	}
	return ""
}

func (o *runOutput) emit(v map[string]any) {
	o.mu.Lock()
	defer o.mu.Unlock()
	b, _ := json.Marshal(v)
	o.w.Write(b)
	o.w.WriteByte('\n')
	o.w.Flush()
}

func (o *runOutput) printf(format string, args ...any) {
	o.mu.Lock()
	defer o.mu.Unlock()
	fmt.Fprintf(o.w, format, args...)
	o.w.Flush()
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

// formatter is the compiled formatter for records of n bytes.
func (o *runOutput) formatter(n int) *btffmt.Formatter {
	f := o.formats[n]
	if f == nil {
		f = btffmt.Compile(o.recordStruct(n))
		o.formats[n] = f
	}
	return f
}

// batch prints a batch of records or printk lines. Records are formatted
// by appending to one buffer: the event path delivers tens of millions a
// second and printing must not be what drops them.
func (o *runOutput) batch(b *runtime.Batch) {
	o.mu.Lock()
	defer o.mu.Unlock()
	pre := o.prefix()
	buf := o.buf[:0]
	for _, line := range b.Lines {
		if o.json {
			buf = append(buf, `{"type":"printk","pid":`...)
			buf = strconv.AppendInt(buf, int64(b.PID), 10)
			buf = append(buf, `,"device":`...)
			buf = strconv.AppendInt(buf, int64(b.Device), 10)
			buf = append(buf, `,"text":`...)
			buf = btffmt.AppendJSONString(buf, []byte(line))
			buf = append(buf, "}\n"...)
		} else {
			buf = fmt.Appendf(buf, "%s%-7d GPU%d  %s\n", pre, b.PID, b.Device, line)
		}
	}
	if o.countOnly {
		o.w.Write(buf)
		o.w.Flush()
		o.buf = buf[:0]
		return
	}
	var head []byte
	if o.json {
		head = fmt.Appendf(nil, `{"type":"record","pid":%d,"device":%d,"map":`, b.PID, b.Device)
		head = btffmt.AppendJSONString(head, []byte(b.Map))
		head = append(head, `,"data":"`...)
	} else {
		head = fmt.Appendf(nil, "%s%-7d GPU%d  %s ", pre, b.PID, b.Device, b.Map)
	}
	var text []byte
	for i := 0; i < b.Len(); i++ {
		rec := b.Record(i)
		f := o.formatter(len(rec))
		buf = append(buf, head...)
		if o.json {
			buf = hex.AppendEncode(buf, rec)
			buf = append(buf, `","text":`...)
			text = f.Append(text[:0], rec)
			buf = btffmt.AppendJSONString(buf, text)
			buf = append(buf, "}\n"...)
		} else {
			buf = f.Append(buf, rec)
			buf = append(buf, '\n')
		}
		if len(buf) >= 1<<20 {
			o.w.Write(buf)
			buf = buf[:0]
		}
	}
	o.w.Write(buf)
	o.w.Flush()
	o.buf = buf[:0]
}

// accounting prints where every GPU record went (per interval with -i).
func (o *runOutput) accounting(st runtime.Stats) {
	if st.RecordsProduced == 0 && st.RingPending == 0 {
		return
	}
	if o.json {
		o.emit(map[string]any{"type": "records", "produced": st.RecordsProduced, "delivered": st.Records + st.PrintkLines,
			"dropped_gpu": st.RingDrops, "discarded": st.RecordsDiscard, "lost_tool": st.RecordsLost, "in_flight_bytes": st.RingPending})
		return
	}
	o.printf("%s%s\n", o.prefix(), toolkit.RecordAccount(st))
}

// maps prints every map's contents (non-zero entries of per-thread arrays)
// and returns the copies it read.
func (o *runOutput) maps(s *runtime.Session) []runtime.MapCopy {
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
		if mc.Ctx != 0 {
			// a context the application created beside the device's
			// primary one has its own copy (README, limits)
			where += fmt.Sprintf(", its own context %#x", mc.Ctx)
		}
		kind := "kernel map"
		if mc.Kernel == nil {
			kind = "GPU " + mc.Kind.String()
		}
		if mc.Kernel == nil && mc.Place.HostResident {
			kind += " in host memory" // read live, without a copy
		}
		if !o.json {
			o.printf("%s%s (%s, %s):\n", o.prefix(), mc.Name, kind, where)
			if mc.Errors > 0 {
				o.printf("  (%d %s counted on the GPU)\n", mc.Errors, errorWord(mc.Kind))
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
				rec := map[string]any{"type": "map", "map": mc.Name, "pid": mc.PID, "device": mc.Device, "key": key, "value": btffmt.Format(vt, v)}
				if mc.Ctx != 0 {
					rec["context"] = fmt.Sprintf("%#x", mc.Ctx)
				}
				o.emit(rec)
			} else {
				o.printf("  %s: %s\n", key, btffmt.Format(vt, v))
			}
			return true
		})
		if err != nil {
			fmt.Fprintf(os.Stderr, "gpubpf: map %s: %v\n", mc.Name, err)
		}
		if n == 0 && !o.json {
			o.printf("  (empty)\n")
		}
	}
	o.kernelIndexes(s)
	return copies
}

// kernelIndexes names the kernels behind the numbers bpf_gpu_kernel_index
// put in the maps (and records) of a program that calls it.
func (o *runOutput) kernelIndexes(s *runtime.Session) {
	if !s.UsesKernelIndex() {
		return
	}
	ks := s.KernelIndexes()
	if o.json {
		for i, k := range ks {
			base, _ := toolkit.KernelNames(k)
			o.emit(map[string]any{"type": "kernel_index", "index": i, "kernel": k, "name": base})
		}
		return
	}
	if len(ks) == 0 {
		return
	}
	o.printf("%skernel indexes (bpf_gpu_kernel_index):\n", o.prefix())
	for i, k := range ks {
		base, _ := toolkit.KernelNames(k)
		if base != k {
			o.printf("  %d: %s (%s)\n", i, base, k)
		} else {
			o.printf("  %d: %s\n", i, k)
		}
	}
	o.printf("  %d: device functions that several instrumented kernels call\n", jit.UnknownKernel)
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
		o.mu.Lock()
		o.w.Write(toolkit.GraphsJSON(st))
		o.w.Write(toolkit.SanitizerJSON(st))
		o.mu.Unlock() // the summary's emit flushes both
		o.emit(map[string]any{"type": "summary", "processes": st.Processes, "kernels_instrumented": matched,
			"kernels_skipped": st.KernelsSkipped, "instrumented_launches": st.Launches, "launch_failures": st.LaunchFailures,
			"records_produced": st.RecordsProduced, "records": st.Records, "printk_lines": st.PrintkLines, "records_dropped_gpu": st.RingDrops,
			"ring_waits": st.RingWaits, "ring_wait_drops": st.RingWaitDrops,
			"loop_budget_spent": st.LoopBudgetSpent, "records_discarded": st.RecordsDiscard, "records_lost_tool": st.RecordsLost, "records_in_flight_bytes": st.RingPending,
			"ring_drains": st.Drains, "ring_drain_bytes": st.DrainBytes, "ring_drain_ms": float64(st.DrainTime.Microseconds()) / 1000,
			"ring_drain_agent_ms": float64(st.DrainAgent.Microseconds()) / 1000, "ring_drain_wait_ms": float64(st.DrainWait.Microseconds()) / 1000,
			"ring_drain_agent_busy_ms": float64(st.DrainAgentBusy.Microseconds()) / 1000, "ring_drain_agent_post_ms": float64(st.DrainAgentPost.Microseconds()) / 1000, "ring_drain_to_agent_ms": float64(st.DrainToAgent.Microseconds()) / 1000, "ring_drain_from_agent_ms": float64(st.DrainFromAgent.Microseconds()) / 1000,
			"ring_drain_scan_ms": float64(st.DrainScan.Microseconds()) / 1000, "ring_drain_deliver_ms": float64(st.DrainDeliver.Microseconds()) / 1000,
			"jit_ms": float64(st.JIT.Microseconds()) / 1000, "first_attach_ms": float64(st.FirstAttach.Microseconds()) / 1000,
			"not_traced": st.NotTraced, "shared_maps_gathered": st.SharedMirrored, "shared_map_folds": st.SharedFolds})
		return
	}
	line := fmt.Sprintf("gpubpf: %d process(es); kernels instrumented: %s; skipped: %s; %d instrumented launches",
		st.Processes, listOrNone(matched), listOrNone(skipped), st.Launches)
	if st.LaunchFailures > 0 {
		line += fmt.Sprintf(" (%d refused by the driver, original ran)", st.LaunchFailures)
	}
	line += "; " + toolkit.RecordAccount(st)
	if st.LoopBudgetSpent > 0 {
		line += fmt.Sprintf("; %d %s (%s; --loop-budget raises it)", st.LoopBudgetSpent, toolkit.LoopBudgetWhat, toolkit.LoopBudgetWhy)
	}
	if len(st.SharedMirrored) > 0 {
		line += fmt.Sprintf("; the GPU's adds to %s gathered in device memory, added to the CPU's copy every %v (%d folds)", strings.Join(st.SharedMirrored, ", "), runtime.FoldEvery, st.SharedFolds)
	}
	if st.Clones > 0 {
		line += fmt.Sprintf("; JIT %.1f ms, first probe active %.0f ms after start", float64(st.JIT.Microseconds())/1000, float64(st.FirstAttach.Microseconds())/1000)
	}
	fmt.Fprintln(os.Stderr, line)
	for _, f := range st.ProbeFailures {
		fmt.Fprintln(os.Stderr, "gpubpf: "+f)
	}
	for _, f := range st.NotTraced {
		fmt.Fprintln(os.Stderr, "gpubpf: not traced: "+f)
	}
	if c := graphs.Sum(st.Graphs).Clause(); c != "" {
		fmt.Fprintln(os.Stderr, "gpubpf: "+c)
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
