package main

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/urfave/cli/v2"

	"github.com/gpubpf/gpubpf/pkg/runtime"
	"github.com/gpubpf/gpubpf/pkg/runtime/gpumap"
	"github.com/gpubpf/gpubpf/pkg/runtime/instrument"
	"github.com/gpubpf/gpubpf/pkg/runtime/jit"
	"github.com/gpubpf/gpubpf/pkg/runtime/verify"
	"github.com/gpubpf/gpubpf/pkg/toolkit"
)

func init() {
	register(&cli.Command{
		Name:      "ptx",
		Usage:     "print the PTX the compiler makes for each GPU program of an eBPF object",
		ArgsUsage: "PROG.bpf.o",
		CustomHelpTemplate: toolkit.CommandHelp(`gpubpf ptx prog.bpf.o > p.ptx                         # the PTX the driver's JIT gets
gpubpf ptx -P launchlate_entry --into ./app ll.bpf.o  # ./app's kernels, the probe in`),
		Description: `Compiles every GPU program of the object (sections kprobe/KERNEL,
kretprobe/KERNEL, with or without bpftime's cuda_ prefix, gpu/entry/KERNEL,
gpu/exit/KERNEL, the memory-access sections kprobe/__memcapture and
gpu/mem/KERNEL, and the direct programs of gpu/direct and
kprobe/__directly_run) and prints one complete PTX module: header, then for each
program its probe .func, its helper .funcs and a small test entry that calls
it (gpubpf_test_entry, gpubpf_test_entry_FUNC for the others). Map addresses
are placeholders (a real run places the maps and bakes their addresses in),
so the module is for reading and for ptxas, not for running:

    gpubpf ptx prog.bpf.o > p.ptx && ptxas -arch=sm_90 p.ptx

With --into FILE (an executable, a shared library, a fatbin or a .ptx file)
and --program NAME (an entry or exit program), it prints instead the module
of FILE's kernels that the program's section selects, with the program
pasted in as a run pastes it (same placeholder addresses): the clone the
driver would compile, to read, to feed ptxas, or to time against the
original (scripts/gpu/ptxab):

    gpubpf ptx -P launchlate_entry --into ./app launchlate.bpf.o > clone.ptx`,
		Flags: []cli.Flag{
			programFlag(), oldProgramFlag(),
			&cli.StringFlag{Name: "sm", Value: "sm_90", Usage: "PTX .target `ARCH`", Action: checkSM},
			&cli.StringFlag{Name: "into", Usage: "print `FILE`'s kernels with the --program pasted in (executable, library, fatbin or .ptx)"},
		},
		Action: ptxCmd,
	})
}

// checkSM refuses an --sm the PTX would not assemble for: sm_50 (Maxwell,
// the oldest the driver's PTX JIT still takes) and later, as sm_NN[a|f].
func checkSM(_ *cli.Context, v string) error {
	var n int
	var rest string
	if k, _ := fmt.Sscanf(v, "sm_%d%s", &n, &rest); k < 1 || n < 50 || n > 999 || (rest != "" && rest != "a" && rest != "f") ||
		v != fmt.Sprintf("sm_%d%s", n, rest) {
		return toolkit.Usagef("--sm %s: want a GPU architecture sm_50 or later, as sm_80, sm_90 or sm_90a (nvidia-smi --query-gpu=compute_cap: 9.0 is sm_90)", v)
	}
	return nil
}

// placeholderBase is where ptx's placeholder map addresses start.
const placeholderBase = 0x7f0000000000

func ptxCmd(c *cli.Context) error {
	file, spec, gpu, err := gpuObject(c)
	if err != nil {
		return err
	}
	if err := runtime.CheckGPUMaps(spec, gpu); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	want := programOf(c)
	budget := map[string]uint64{} // the programs a run gives the loop budget
	for _, g := range gpu {
		if want != "" && g.Spec.Name != want {
			continue
		}
		v, err := verify.Judge(spec, g.Spec, verify.Options{Direct: g.Direct()})
		if v.LoopBudget {
			budget[g.Spec.Name] = runtime.DefaultLoopBudget
		}
		if errors.Is(err, verify.ErrPrivileges) {
			// The text reaches no GPU: print it, unchecked, and say so.
			fmt.Fprintf(c.App.ErrWriter, "gpubpf ptx: %s not checked: %v\n", g.Spec.Name, err)
		} else if err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
	}
	maps, notes := placeholderMaps(spec)
	constants := runtime.ReadOnlyData(spec)
	printk := gpumap.Placement{Kind: gpumap.RingBuf, Addr: placeholderBase - 0x10000000, HostResident: true, MaxEntries: 1 << 20}
	if into := c.String("into"); into != "" {
		return ptxInto(c, file, gpu, into, jit.Options{Maps: maps, Printk: printk, Constants: constants}, budget)
	}
	var fns []*jit.Function
	w := c.App.Writer
	for _, g := range gpu {
		if want != "" && g.Spec.Name != want {
			continue
		}
		f, err := jit.Compile(g.Spec, jit.Options{Maps: maps, Printk: printk, FuncName: "gpubpf_" + sanitize(g.Spec.Name), Constants: constants, LoopBudget: budget[g.Spec.Name]})
		if err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		where := g.Site.Where(g.Kernel)
		if g.Direct() {
			where = "run as a kernel of its own (gpubpf run --direct)"
		}
		fmt.Fprintf(w, "// gpubpf ptx %s: program %s (section %s) -> .func %s %s; reads ctx: %v (%d bytes)\n",
			file, g.Spec.Name, g.Spec.SectionName, f.Name, where, f.UsesCtx, f.CtxBytes)
		if b := budget[g.Spec.Name]; b > 0 {
			fmt.Fprintf(w, "//   its loops' bounds come from data: each loop head counts, and a call past %d returns 0 there\n", b)
		}
		fns = append(fns, f)
	}
	n := len(fns)
	if n > 0 {
		fmt.Fprintln(w, "// Map addresses below are PLACEHOLDERS; a run bakes in the real ones:")
		for _, note := range notes {
			fmt.Fprintf(w, "//   %s\n", note)
		}
		fmt.Fprintf(w, "//   trace_printk ring: %#x\n", printk.Addr)
		fmt.Fprint(w, jit.TestModuleAll(fns, c.String("sm")))
	}
	if n == 0 {
		var names []string
		for _, g := range gpu {
			names = append(names, g.Spec.Name)
		}
		if want != "" && len(names) > 0 {
			return fmt.Errorf("--program %s: %s has no GPU program %s; its GPU programs are %s", want, file, want, strings.Join(names, ", "))
		}
		return fmt.Errorf("%s has no GPU programs: gpubpf ptx compiles programs in SEC(\"kprobe/KERNEL\"), SEC(\"kretprobe/KERNEL\"), SEC(\"gpu/entry/KERNEL\"), SEC(\"gpu/exit/KERNEL\"), SEC(\"kprobe/__memcapture\"), SEC(\"gpu/mem/KERNEL\") and SEC(\"gpu/direct\") sections", file)
	}
	return nil
}

// placeholderMaps places every GPU-usable map of the object at a made-up
// address, 256 MiB apart.
func placeholderMaps(spec *ebpf.CollectionSpec) (map[string]gpumap.Placement, []string) {
	names := make([]string, 0, len(spec.Maps))
	for name := range spec.Maps {
		names = append(names, name)
	}
	sort.Strings(names)
	out := map[string]gpumap.Placement{}
	var notes []string
	for i, name := range names {
		ms := spec.Maps[name]
		p, err := gpumap.PlacementOf(ms)
		if err != nil {
			notes = append(notes, fmt.Sprintf("map %s: not placed (%v)", name, err))
			continue
		}
		p.Addr = placeholderBase + uint64(i)*0x10000000
		out[name] = p
		where := ""
		if p.HostResident {
			where = ", host memory"
		}
		notes = append(notes, fmt.Sprintf("map %s (%v%s): %#x", name, p.Kind, where, p.Addr))
	}
	return out, notes
}

// sanitize makes a PTX identifier out of a program name.
func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			b[i] = '_'
		}
	}
	return string(b)
}

// ptxInto prints the clone of into's kernels that --program's section
// selects, the program pasted at its site.
func ptxInto(c *cli.Context, file string, gpu []runtime.GPUProgram, into string, opts jit.Options, budget map[string]uint64) error {
	want := programOf(c)
	if want == "" {
		return toolkit.Usagef("gpubpf ptx --into needs --program NAME: the entry or exit program to paste in")
	}
	var g *runtime.GPUProgram
	for i := range gpu {
		if gpu[i].Spec.Name == want {
			g = &gpu[i]
		}
	}
	if g == nil || (g.Site != runtime.SiteEntry && g.Site != runtime.SiteExit) {
		return fmt.Errorf("--into: %s has no entry or exit program %s (gpu/entry/KERNEL, gpu/exit/KERNEL, kprobe/KERNEL or kretprobe/KERNEL)", file, want)
	}
	opts.FuncName = "gpubpf_" + sanitize(g.Spec.Name)
	opts.LoopBudget = budget[g.Spec.Name]
	f, err := jit.Compile(g.Spec, opts)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	src, _, err := instrument.PTXFromFile(into, g.Kernel)
	if err != nil {
		return fmt.Errorf("--into: %w", err)
	}
	// a placeholder kernel index, 0 at every site (a run numbers the kernels it instruments)
	p := runtime.ProbeOf(f, func(string) uint32 { return 0 })
	req := instrument.Request{Kernels: []string{g.Kernel}}
	if g.Site == runtime.SiteEntry {
		req.Entry = p
	} else {
		req.Exit = p
	}
	r, err := instrument.Instrument(src, req)
	if err != nil {
		return fmt.Errorf("--into %s: %w", into, err)
	}
	fmt.Fprintf(c.App.Writer, "// gpubpf ptx --into %s: kernels %s with %s (%s) pasted in; map addresses are PLACEHOLDERS; launch words: %v\n%s",
		into, strings.Join(r.Kernels, ", "), g.Spec.Name, g.Site.Where(g.Kernel), f.UsesLaunchWords, r.PTX)
	return nil
}
