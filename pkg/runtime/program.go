package runtime

import (
	"fmt"
	"strings"

	"github.com/cilium/ebpf"
)

// ProbeSite says where in a GPU kernel a GPU program runs.
type ProbeSite int

const (
	// SiteEntry runs the program at kernel entry, or at the kernel's stub
	// hook call (__bpftime_cuda__kernel_trace) where it has one.
	SiteEntry ProbeSite = iota
	// SiteExit runs the program before every exit of the kernel.
	SiteExit
	// SiteMem runs the program right after every global load, store and
	// atomic of the kernel (and of the device functions it calls), with
	// ctx pointing to the access (struct gpubpf_mem_access in bpf/gpu.h).
	SiteMem
	// SiteDirect: the program is no probe but a kernel of its own, run
	// with no application over maps the user fills (gpubpf run --direct).
	SiteDirect
)

func (s ProbeSite) String() string {
	switch s {
	case SiteExit:
		return "exit"
	case SiteMem:
		return "memory access"
	case SiteDirect:
		return "direct"
	}
	return "entry"
}

// MemCapture is the kernel name of bpftime's memory-access probes:
// SEC("kprobe/__memcapture") runs at every memory access of every kernel.
const MemCapture = "__memcapture"

// Where says where the program runs in kernel (a name or pattern), for
// what a tool prints about it: "at the entry of K", "at every global
// load/store/atomic of K".
func (s ProbeSite) Where(kernel string) string {
	if kernel == "*" {
		kernel = "every kernel"
	}
	switch s {
	case SiteExit:
		return "at every exit of " + kernel
	case SiteMem:
		return "at every global load/store/atomic of " + kernel
	}
	return "at the entry of " + kernel
}

// Section names of direct programs: bpftime's (its kprobe on a kernel that
// does not exist) and gpubpf's own.
const (
	SectionDirectBpftime = "kprobe/__directly_run"
	SectionDirect        = "gpu/direct"
)

// GPUProgram is a program of the collection that runs inside CUDA kernels.
type GPUProgram struct {
	Spec *ebpf.ProgramSpec
	Site ProbeSite
	// Kernel is the pattern from the section name (mangled, demangled or
	// glob), with bpftime's "cuda_" prefix already stripped; "" for a
	// direct program.
	Kernel string
}

// Direct reports a program that runs as a kernel of its own (SiteDirect).
func (g GPUProgram) Direct() bool { return g.Site == SiteDirect }

// partitionDirect splits GPU programs into probes and direct programs,
// each in the order given.
func partitionDirect(gpu []GPUProgram) (probes, direct []GPUProgram) {
	for _, g := range gpu {
		if g.Direct() {
			direct = append(direct, g)
		} else {
			probes = append(probes, g)
		}
	}
	return probes, direct
}

// CPUProgram is a program of the collection that runs in the Linux kernel
// as a uprobe or uretprobe on a CUDA library or the executable.
type CPUProgram struct {
	Spec   *ebpf.ProgramSpec
	Return bool
	// Path and Symbol come from "uprobe/PATH:SYMBOL", or for a bare
	// "uprobe"/"uretprobe" section from Options.UprobeTargets (Path "exe":
	// the traced executable). Both are empty in a bare section no target
	// was given for (Open refuses those).
	Path, Symbol string
	// Flag is the --attach value that gave a bare section its target, for
	// messages ("" when the section names it).
	Flag string
}

// Bare reports a "uprobe" or "uretprobe" section without a target: libbpf
// loaders pick the function at run time.
func (c CPUProgram) Bare() bool { return !strings.Contains(c.Spec.SectionName, "/") }

// sectionsHelp lists the sections SplitPrograms accepts, for errors.
const sectionsHelp = "a GPU probe (kprobe/KERNEL, kretprobe/KERNEL, gpu/entry/KERNEL, gpu/exit/KERNEL; kprobe/__memcapture or gpu/mem/KERNEL at every global memory access), a direct GPU program (gpu/direct, kprobe/__directly_run) nor a uprobe (uprobe/PATH:SYMBOL, uretprobe/PATH:SYMBOL)"

// SplitPrograms sorts the programs of a collection into GPU programs and
// CPU programs, following bpftime's conventions (kprobe/<kernel>,
// kretprobe/<kernel>, an optional cuda_ prefix, kprobe/__memcapture for
// every memory access of every kernel) and gpubpf's own spelling
// (gpu/entry/<kernel>, gpu/exit/<kernel>, gpu/mem/<kernel>). Direct
// programs, kernels of their own (SectionDirectBpftime, SectionDirect), are
// GPU programs with SiteDirect. Any other program type is an error naming
// the program: gpubpf knows no attach point for it.
func SplitPrograms(spec *ebpf.CollectionSpec) (gpu []GPUProgram, cpu []CPUProgram, err error) {
	for _, name := range sortedKeys(spec.Programs) {
		p := spec.Programs[name]
		sec := p.SectionName
		switch {
		// bpftime's spelling would otherwise read as a probe on a kernel
		// named __directly_run, which no application has.
		case sec == SectionDirectBpftime || sec == SectionDirect:
			gpu = append(gpu, GPUProgram{Spec: p, Site: SiteDirect})
		case hasPrefix(sec, "kprobe/") && kernelOfSection(sec) == MemCapture:
			// bpftime's memory-access probe names no kernel: it runs in
			// all of them (-k narrows it).
			gpu = append(gpu, GPUProgram{Spec: p, Site: SiteMem, Kernel: "*"})
		case hasPrefix(sec, "kretprobe/") && kernelOfSection(sec) == MemCapture:
			return nil, nil, fmt.Errorf("program %s (section %q): a memory-access probe has no return to run at; put it in SEC(\"kprobe/%s\") (every kernel) or SEC(\"gpu/mem/KERNEL\")", name, sec, MemCapture)
		case hasPrefix(sec, "gpu/mem/"):
			gpu = append(gpu, GPUProgram{Spec: p, Site: SiteMem, Kernel: kernelOfSection(sec)})
		case hasPrefix(sec, "kprobe/"), hasPrefix(sec, "gpu/entry/"):
			gpu = append(gpu, GPUProgram{Spec: p, Site: SiteEntry, Kernel: kernelOfSection(sec)})
		case hasPrefix(sec, "kretprobe/"), hasPrefix(sec, "gpu/exit/"):
			gpu = append(gpu, GPUProgram{Spec: p, Site: SiteExit, Kernel: kernelOfSection(sec)})
		case sec == "uprobe" || sec == "uretprobe" || hasPrefix(sec, "uprobe/") || hasPrefix(sec, "uretprobe/"):
			c := CPUProgram{Spec: p, Return: strings.HasPrefix(sec, "uretprobe")}
			if _, target, ok := strings.Cut(sec, "/"); ok {
				i := strings.LastIndexByte(target, ':')
				if i <= 0 || i == len(target)-1 {
					kind, _, _ := strings.Cut(sec, "/")
					return nil, nil, fmt.Errorf("program %s (section %q) names no PATH:SYMBOL: write it as SEC(\"%s/PATH:SYMBOL\"), e.g. SEC(\"%s/libcudart.so:cudaLaunchKernel\"), or as a bare SEC(\"%s\") with --attach %s=SYMBOL[@PATH]",
						name, sec, kind, kind, kind, name)
				}
				c.Path, c.Symbol = target[:i], target[i+1:]
			}
			cpu = append(cpu, c)
		default:
			return nil, nil, fmt.Errorf("program %s (section %q) is neither %s: put it in one of those sections, or leave it out by naming the others with --program", name, sec, sectionsHelp)
		}
	}
	for _, g := range gpu {
		if g.Kernel == "" && g.Site == SiteMem {
			return nil, nil, fmt.Errorf("program %s (section %q) names no CUDA kernel: write it as SEC(\"gpu/mem/KERNEL\") with the kernel's mangled or demangled name or a glob (SEC(\"gpu/mem/*\") or SEC(\"kprobe/%s\"): every kernel), or retarget it with -k PATTERN", g.Spec.Name, g.Spec.SectionName, MemCapture)
		}
		if g.Kernel == "" && !g.Direct() {
			return nil, nil, fmt.Errorf("program %s (section %q) names no CUDA kernel: write it as SEC(\"kprobe/KERNEL\") with the kernel's mangled or demangled name (gpubpf kernels BINARY lists them), or retarget it with -k PATTERN", g.Spec.Name, g.Spec.SectionName)
		}
	}
	return gpu, cpu, nil
}

func hasPrefix(s, p string) bool { return strings.HasPrefix(s, p) }

// kernelOfSection returns the kernel pattern of a GPU section, dropping
// bpftime's "cuda_" marker: "kretprobe/cuda__Z9vectorAddPKfS0_Pf" names
// "_Z9vectorAddPKfS0_Pf".
func kernelOfSection(sec string) string {
	_, k, _ := strings.Cut(sec, "/")
	if strings.HasPrefix(sec, "gpu/") {
		_, k, _ = strings.Cut(k, "/")
	}
	if strings.HasPrefix(k, "cuda_") && len(k) > len("cuda_") {
		k = k[len("cuda_"):]
	}
	return k
}
