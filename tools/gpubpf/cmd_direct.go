package main

import (
	"bufio"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/urfave/cli/v2"

	"github.com/gpubpf/gpubpf/pkg/btffmt"
	"github.com/gpubpf/gpubpf/pkg/runtime"
	"github.com/gpubpf/gpubpf/pkg/runtime/agentproto"
	"github.com/gpubpf/gpubpf/pkg/runtime/gpumap"
	"github.com/gpubpf/gpubpf/pkg/runtime/mapjson"
	"github.com/gpubpf/gpubpf/pkg/toolkit"
)

// directFlags are gpubpf run's flags for direct runs.
func directFlags() []cli.Flag {
	return []cli.Flag{
		&cli.BoolFlag{Name: "direct", Usage: "run the object's direct programs (SEC(\"gpu/direct\"), SEC(\"kprobe/__directly_run\")) as kernels of their own, with no application"},
		&cli.StringFlag{Name: "grid", Usage: "with --direct: blocks per launch as `X[,Y[,Z]]` (default 1)"},
		&cli.StringFlag{Name: "block", Usage: "with --direct: threads per block as `X[,Y[,Z]]` (default 256)"},
		&cli.GenericFlag{Name: "map", Value: &repeated{}, Usage: "with --direct: fill a map before the programs run, as `NAME=JSON` (may repeat; see DIRECT RUNS)"},
		&cli.StringFlag{Name: "map-file", Usage: "with --direct: fill maps from `FILE.json`, an object of map names and values (a --dump file reads back)"},
		&cli.StringFlag{Name: "dump", Usage: "with --direct: write every map the programs use to `FILE.json`, in --map-file's form"},
	}
}

// directHelp is run's help text on direct runs.
const directHelp = `

DIRECT RUNS: gpubpf run --direct OBJ starts no application. Programs in
SEC("gpu/direct") or bpftime's SEC("kprobe/__directly_run") are kernels of
their own: the tool starts a host process (the agent library itself), places
the maps the programs use on the GPU (--device), fills them, launches each
program once, in the object's order or --program's, over --grid blocks of
--block threads (--threads N: ceil(N/block) blocks in one dimension), then
prints each program's kernel time, its trace_printk lines and the maps (large
maps: their first and last non-zero entries and a count; --dump writes them
all). -d SECONDS bounds each kernel (default 60). Per-thread arrays get a slot
for every thread of the launch.

Map values (--map NAME=JSON, --map-file FILE.json holding {"NAME": JSON}):
an array takes [v0, v1, ...] (keys 0, 1, ...), {"KEY": v} for some keys, or
{"start": A, "step": B} for value[k] = A + B*k over every key (optional
"count": N); a hash map takes {"KEY": v}. A value is a number (stored
little-endian, range-checked, negative allowed), an array of numbers split
evenly over the value (u32[3]: [64,64,64]) or "0x" and its bytes in hex.
With -j: {"type":"direct","program","entry","grid","block","threads",
"kernel_ns","wall_ns","timed"}, printk lines, {"type":"map",...} entries
(with {"type":"map_summary","map","entries","nonzero","shown"} for large
maps) and a final {"type":"summary",...}.`

// repeated is a flag that may repeat and whose values keep their commas
// (JSON), which urfave/cli's slice flags would split.
type repeated struct{ vals []string }

func (r *repeated) Set(v string) error { r.vals = append(r.vals, v); return nil }
func (r *repeated) String() string     { return strings.Join(r.vals, " ") }

// directOnly are the flags that mean nothing without --direct.
var directOnly = []string{"device", "grid", "block", "map", "map-file", "dump"}

// notDirect refuses, before a normal run starts, the flags of direct runs.
func notDirect(c *cli.Context) error {
	for _, f := range directOnly {
		if c.IsSet(f) {
			return toolkit.Usagef("--%s applies to direct runs only: add --direct (gpubpf run --direct OBJ), or drop --%s", f, f)
		}
	}
	return nil
}

// launchShape is a direct run's grid and block from --grid, --block and
// --threads, checked against CUDA's limits.
func launchShape(c *cli.Context) (grid, block [3]uint32, err error) {
	block, err = dims(c, "block", [3]uint32{256, 1, 1})
	if err != nil {
		return
	}
	grid, err = dims(c, "grid", [3]uint32{1, 1, 1})
	if err != nil {
		return
	}
	if n := uint64(c.Uint("threads")); n > 0 {
		if c.IsSet("grid") {
			return grid, block, toolkit.Usagef("give --threads %d or --grid %s, not both: --threads makes a 1-D grid of ceil(N/block) blocks", n, c.String("grid"))
		}
		if block[1] != 1 || block[2] != 1 {
			return grid, block, toolkit.Usagef("--threads %d makes a 1-D grid: give a 1-D --block X, or a --grid for --block %s", n, c.String("block"))
		}
		g := (n + uint64(block[0]) - 1) / uint64(block[0])
		if g > 1<<31-1 {
			return grid, block, toolkit.Usagef("--threads %d needs %d blocks of %d; a grid has at most 2147483647 in x: use fewer threads or a bigger --block", n, g, block[0])
		}
		grid = [3]uint32{uint32(g), 1, 1}
	}
	if t := uint64(block[0]) * uint64(block[1]) * uint64(block[2]); t > 1024 || block[2] > 64 {
		return grid, block, toolkit.Usagef("--block %s: a block holds at most 1024 threads (and 64 in z); this is %d", c.String("block"), t)
	}
	if grid[1] > 65535 || grid[2] > 65535 || grid[0] > 1<<31-1 {
		return grid, block, toolkit.Usagef("--grid %s: at most 2147483647 blocks in x and 65535 in y and z", c.String("grid"))
	}
	return grid, block, nil
}

// dims reads X[,Y[,Z]].
func dims(c *cli.Context, flag string, def [3]uint32) ([3]uint32, error) {
	v := c.String(flag)
	if !c.IsSet(flag) {
		return def, nil
	}
	parts := strings.Split(v, ",")
	out := [3]uint32{1, 1, 1}
	for i, p := range parts {
		n, err := strconv.ParseUint(strings.TrimSpace(p), 10, 32)
		if i >= 3 || err != nil || n == 0 {
			return out, toolkit.Usagef("--%s %s: want X[,Y[,Z]], positive integers, e.g. --%s 4,4", flag, v, flag)
		}
		out[i] = uint32(n)
	}
	return out, nil
}

// programOrder is the object's programs in the order they are defined (by
// section, then offset in it): the order a direct run launches them in.
func programOrder(file string, spec *ebpf.CollectionSpec) []string {
	names := make([]string, 0, len(spec.Programs))
	for n := range spec.Programs {
		names = append(names, n)
	}
	sort.Strings(names)
	f, err := elf.Open(file)
	if err != nil {
		return names
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		return names
	}
	type at struct {
		sec  elf.SectionIndex
		addr uint64
	}
	pos := map[string]at{}
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && spec.Programs[s.Name] != nil {
			pos[s.Name] = at{s.Section, s.Value}
		}
	}
	sort.SliceStable(names, func(i, j int) bool {
		a, b := pos[names[i]], pos[names[j]]
		if a.sec != b.sec {
			return a.sec < b.sec
		}
		return a.addr < b.addr
	})
	return names
}

// directFills reads --map-file, then --map (later values win), for the
// maps the session's programs use.
func directFills(c *cli.Context, sess *runtime.Session) (map[string]runtime.MapFill, error) {
	known := map[string]mapjson.Map{}
	for name, spec := range sess.DirectMaps() {
		m, err := mapjson.FromSpec(name, spec)
		if err != nil {
			return nil, err
		}
		known[name] = m
	}
	out := map[string]runtime.MapFill{}
	add := func(name string, f mapjson.Fill) {
		o := out[name]
		out[name] = runtime.MapFill{Keys: append(o.Keys, f.Keys...), Values: append(o.Values, f.Values...)}
	}
	if file := c.String("map-file"); file != "" {
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("--map-file %s: %w; give a JSON file of map names and values", file, err)
		}
		fills, err := mapjson.ParseFile(known, data, file)
		if err != nil {
			return nil, err
		}
		for _, name := range slices.Sorted(maps.Keys(fills)) {
			add(name, fills[name])
		}
	}
	for _, v := range c.Generic("map").(*repeated).vals {
		name, js, ok := strings.Cut(v, "=")
		if !ok || name == "" {
			return nil, toolkit.Usagef("--map %s: want NAME=JSON, e.g. --map 'vec_N=[1048576]' or --map 'vec_A={\"start\":0,\"step\":1}'", v)
		}
		m, ok := known[name]
		if !ok {
			return nil, mapjson.UnknownMap("--map "+name, name, known)
		}
		f, err := mapjson.Parse(m, []byte(js), "--map "+name)
		if err != nil {
			return nil, err
		}
		add(name, f)
	}
	return out, nil
}

// runDirect is gpubpf run --direct OBJ.
func runDirect(c *cli.Context, obj string, cmdArgs []string) error {
	switch {
	case len(cmdArgs) > 0:
		return toolkit.Usagef("--direct runs the object's programs with no application: drop \"-- %s\", or drop --direct to trace it", strings.Join(cmdArgs, " "))
	case len(c.IntSlice(toolkit.FlagPID)) > 0:
		return toolkit.Usagef("--direct runs with no application: drop -p, or drop --direct to trace the process")
	case len(c.StringSlice(toolkit.FlagKernel)) > 0:
		return toolkit.Usagef("direct programs run in no application kernel: drop -k")
	case c.IsSet(toolkit.FlagInterval):
		return toolkit.Usagef("-i does not apply to --direct: each program runs once, and its results print at the end")
	case len(c.StringSlice("attach")) > 0:
		return toolkit.Usagef("--attach places uprobes in an application, which --direct has none of: drop it")
	}
	dev := 0
	switch devs := toolkit.DevicesOf(c); {
	case len(devs) > 1:
		return toolkit.Usagef("--direct runs on one GPU: give --device once")
	case len(devs) == 1:
		dev = devs[0]
	}
	grid, block, err := launchShape(c)
	if err != nil {
		return err
	}
	ringBytes, err := toolkit.RingBytesOf(c)
	if err != nil {
		return err
	}
	if c.Bool(toolkit.FlagNoDrop) {
		// the host reads a direct run's rings once the kernel is done:
		// a thread waiting for room would wait for nothing
		return toolkit.Usagef("--no-drop is for probes in an application; a direct run's rings are read after its kernel, so size them with --ring-mb")
	}
	dump := c.String("dump")
	if dump != "" {
		if st, err := os.Stat(filepath.Dir(dump)); err != nil || !st.IsDir() {
			return fmt.Errorf("--dump %s: directory %s does not exist; give a file in an existing directory", dump, filepath.Dir(dump))
		}
	}
	spec, err := loadObject(obj)
	if err != nil {
		return err
	}
	if err := checkPrograms(c, obj, spec); err != nil {
		return err
	}
	order := c.StringSlice("program")
	if len(order) == 0 {
		order = programOrder(obj, spec)
	}
	sess, err := runtime.Open(spec, runtime.Options{
		Direct:    true,
		Programs:  order,
		Client:    "gpubpf run --direct",
		RingBytes: ringBytes,
		Log:       toolkit.LogOf(c),
		Warn:      toolkit.WarnOf("gpubpf"),
	})
	if err != nil {
		return fmt.Errorf("%s: %w", obj, err)
	}
	defer sess.Close()
	fills, err := directFills(c, sess)
	if err != nil {
		return err
	}
	out := newRunOutput(os.Stdout, spec, c.Bool(toolkit.FlagJSON), c.Bool(toolkit.FlagTimestamp), c.String("record-type"))
	var names []string
	for _, g := range sess.GPUPrograms() {
		names = append(names, g.Spec.Name)
	}
	ready := func(d agentproto.Device) {
		if !out.json {
			fmt.Fprintf(os.Stderr, "Running %s (%d direct program(s): %s) on GPU %d (%s), grid %s block %s... Hit Ctrl-C to end.\n",
				obj, len(names), strings.Join(names, ", "), d.Ordinal, d.Name, triple(grid), triple(block))
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, runErr := sess.RunDirect(runtime.DirectOptions{
		Device:  dev,
		Grid:    grid,
		Block:   block,
		Fill:    fills,
		Timeout: time.Duration(c.Float64(toolkit.FlagDuration) * float64(time.Second)),
		Context: ctx,
		Ready:   ready,
	})
	if res == nil {
		return runErr
	}
	for _, r := range res.Runs {
		out.directRun(r)
	}
	var dumpErr error
	if len(res.Maps) > 0 {
		if dump != "" {
			dumpErr = writeDump(dump, res.Maps)
		}
		out.directMaps(res.Maps, dump)
	}
	closeErr := sess.Close()
	st := sess.Stats()
	out.directSummary(res, len(names), st)
	switch {
	case errors.Is(runErr, runtime.ErrInterrupted):
		fmt.Fprintf(os.Stderr, "gpubpf: %v\n", runErr)
		return nil
	case runErr != nil:
		return runErr
	case dumpErr != nil:
		return dumpErr
	case closeErr != nil:
		fmt.Fprintf(os.Stderr, "gpubpf: detaching: %v\n", closeErr)
	}
	return nil
}

func triple(d [3]uint32) string { return fmt.Sprintf("(%d,%d,%d)", d[0], d[1], d[2]) }

// directRun prints one program's launch and what it printed.
func (o *runOutput) directRun(r runtime.DirectRun) {
	threads := uint64(r.Grid[0]) * uint64(r.Grid[1]) * uint64(r.Grid[2]) * uint64(r.Block[0]) * uint64(r.Block[1]) * uint64(r.Block[2])
	if o.json {
		o.emit(map[string]any{"type": "direct", "program": r.Program, "entry": r.Entry, "grid": r.Grid, "block": r.Block,
			"threads": threads, "kernel_ns": r.Kernel.Nanoseconds(), "wall_ns": r.Wall.Nanoseconds(), "timed": r.Timed})
	} else {
		what := "kernel time"
		if !r.Timed {
			what = "kernel wall time"
		}
		o.printf("%s%s: grid %s block %s, %d threads, %s %s\n", o.prefix(), r.Program, triple(r.Grid), triple(r.Block), threads, what,
			toolkit.FormatNs(uint64(r.Kernel.Nanoseconds())))
	}
	for _, b := range r.Batches {
		o.batch(b)
	}
}

// Maps larger than fullMap entries print their first and last showEdge
// non-zero entries and a count.
const (
	fullMap  = 16
	showEdge = 5
)

// directMaps prints the maps after a direct run, never all of a large one.
func (o *runOutput) directMaps(copies []runtime.MapCopy, dump string) {
	for _, mc := range copies {
		var kt, vt btf.Type
		if mc.Spec != nil {
			kt, vt = mc.Spec.Key, mc.Spec.Value
		}
		kind := "kernel map"
		if mc.Kernel == nil {
			kind = "GPU " + mc.Kind.String()
		}
		type kv struct{ k, v []byte }
		var head, tail []kv
		total, nonzero := 0, 0
		all := mc.Spec != nil && mc.Spec.MaxEntries <= fullMap
		err := mc.Entries(func(k, v []byte) bool {
			total++
			if !all && allZero(v) {
				return true
			}
			nonzero++
			e := kv{append([]byte(nil), k...), append([]byte(nil), v...)}
			if all || len(head) < showEdge {
				head = append(head, e)
			} else {
				tail = append(tail, e)
				if len(tail) > showEdge {
					tail = tail[1:]
				}
			}
			return true
		})
		if err != nil {
			fmt.Fprintf(os.Stderr, "gpubpf: map %s: %v\n", mc.Name, err)
		}
		key := func(k []byte) string {
			if mc.Kind == gpumap.PerThreadArray && len(k) == 8 {
				return fmt.Sprintf("thread %d key %s", leU32(k[4:]), btffmt.Format(kt, k[:4]))
			}
			return btffmt.Format(kt, k)
		}
		shown := len(head) + len(tail)
		if dump != "" {
			shown = 0
			head, tail = nil, nil
		}
		if o.json {
			for _, e := range append(head, tail...) {
				o.emit(map[string]any{"type": "map", "map": mc.Name, "pid": mc.PID, "device": mc.Device, "key": key(e.k), "value": btffmt.Format(vt, e.v)})
			}
			if !all || dump != "" {
				o.emit(map[string]any{"type": "map_summary", "map": mc.Name, "device": mc.Device, "entries": total, "nonzero": nonzero, "shown": shown})
			}
			continue
		}
		if dump != "" {
			o.printf("%s%s (%s, GPU %d): %d entries, %d non-zero: written to %s\n", o.prefix(), mc.Name, kind, mc.Device, total, nonzero, dump)
			continue
		}
		o.printf("%s%s (%s, GPU %d):\n", o.prefix(), mc.Name, kind, mc.Device)
		if mc.Errors > 0 {
			o.printf("  (%d %s counted on the GPU)\n", mc.Errors, errorWord(mc.Kind))
		}
		for _, e := range head {
			o.printf("  %s: %s\n", key(e.k), btffmt.Format(vt, e.v))
		}
		if nonzero > shown {
			o.printf("  ...\n")
		}
		for _, e := range tail {
			o.printf("  %s: %s\n", key(e.k), btffmt.Format(vt, e.v))
		}
		switch {
		case total == 0 || (!all && nonzero == 0):
			o.printf("  (all %d entries are zero)\n", total)
		case !all:
			o.printf("  (%d non-zero of %d entries, %d shown; --dump FILE.json writes them all)\n", nonzero, total, shown)
		}
	}
}

func leU32(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// writeDump writes every map in --map-file's form (per-thread arrays, which
// --map cannot fill, as {"THREAD": {"KEY": value}}).
func writeDump(path string, copies []runtime.MapCopy) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".gpubpf-dump-*")
	if err != nil {
		return fmt.Errorf("--dump %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	w := bufio.NewWriterSize(tmp, 1<<20)
	w.WriteString("{")
	var buf []byte
	first := true
	for _, mc := range copies {
		if mc.Spec == nil {
			continue
		}
		m, err := mapjson.FromSpec(mc.Name, mc.Spec)
		if err != nil {
			continue
		}
		if !first {
			w.WriteString(",")
		}
		first = false
		buf = strconv.AppendQuote(buf[:0], mc.Name)
		buf = append(buf, ":\n"...)
		w.Write(buf)
		array := mc.Kernel != nil || mc.Kind == gpumap.Array
		open, end := "{", "}"
		if array {
			open, end = "[", "]"
		}
		w.WriteString(open)
		n := 0
		thread := int64(-1)
		err = mc.Entries(func(k, v []byte) bool {
			buf = buf[:0]
			switch {
			case mc.Kind == gpumap.PerThreadArray && len(k) == 8:
				t := int64(leU32(k[4:]))
				if t != thread {
					if thread >= 0 {
						buf = append(buf, "},"...)
					}
					buf = strconv.AppendQuote(buf, strconv.FormatInt(t, 10))
					buf = append(buf, ":{"...)
					thread, n = t, 0
				}
				if n > 0 {
					buf = append(buf, ',')
				}
				buf = strconv.AppendQuote(buf, strconv.FormatUint(uint64(leU32(k[:4])), 10))
				buf = append(buf, ':')
			case array:
				if n > 0 {
					buf = append(buf, ',')
				}
			default:
				if n > 0 {
					buf = append(buf, ',')
				}
				buf = m.AppendKey(buf, k)
				buf = append(buf, ':')
			}
			buf = m.AppendValue(buf, v)
			n++
			_, err := w.Write(buf)
			return err == nil
		})
		if thread >= 0 {
			w.WriteString("}")
		}
		w.WriteString(end + "\n")
		if err != nil {
			return fmt.Errorf("--dump %s: map %s: %w", path, mc.Name, err)
		}
	}
	w.WriteString("}\n")
	if err := w.Flush(); err != nil {
		tmp.Close()
		return fmt.Errorf("--dump %s: %w", path, err)
	}
	if err := tmp.Chmod(0o644); err != nil { // CreateTemp's 0600 is for its name, not for a result
		tmp.Close()
		return fmt.Errorf("--dump %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("--dump %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("--dump %s: %w", path, err)
	}
	return nil
}

// directSummary is the run's account: programs launched, and where every
// record of the GPU went.
func (o *runOutput) directSummary(res *runtime.DirectResult, programs int, st runtime.Stats) {
	if o.json {
		o.emit(map[string]any{"type": "summary", "programs": programs, "launched": len(res.Runs), "device": res.Device.Ordinal,
			"device_name": res.Device.Name, "driver": res.Driver, "printk_lines": st.PrintkLines, "records": st.Records,
			"records_produced": st.RecordsProduced, "records_dropped_gpu": st.RingDrops})
		return
	}
	fmt.Fprintf(os.Stderr, "gpubpf: %d of %d direct program(s) ran on GPU %d (%s, driver %d); %s\n",
		len(res.Runs), programs, res.Device.Ordinal, res.Device.Name, res.Driver, toolkit.RecordAccount(st))
}
