package runtime

import (
	"errors"
	"fmt"
	"sort"

	"github.com/gpubpf/gpubpf/pkg/procmaps"
	"github.com/gpubpf/gpubpf/pkg/runtime/agentclient"
	"github.com/gpubpf/gpubpf/pkg/runtime/fatbin"
)

// ModuleKernels is the kernel list of one module a process has loaded.
type ModuleKernels struct {
	ModuleID uint64
	Source   string // "library", "module-file /path", ...
	Kernels  []fatbin.Kernel
	Err      error // the module's image could not be read or parsed
}

// KernelsOf lists, through its agent, the kernels of every module process
// pid has loaded, with where their code is (PTX and/or SASS).
// A process without the agent gets the device code of the files it maps
// instead (ModuleID 0): read-only, nothing is loaded into it; modules it
// built at run time (NVRTC, Triton) are not among them.
func KernelsOf(pid int) ([]ModuleKernels, error) {
	conn, err := agentclient.DialWith(pid, agentclient.Options{Client: "gpubpf kernels"})
	var na *agentclient.NoAgentError
	if errors.As(err, &na) {
		return kernelsMapped(pid)
	}
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	inv, err := conn.Inventory(true)
	if err != nil {
		return nil, fmt.Errorf("process %d: listing its CUDA modules: %w", pid, err)
	}
	p := &Process{PID: pid, conn: conn}
	var out []ModuleKernels
	for _, m := range inv.Modules {
		if m.Unloaded {
			continue
		}
		mk := ModuleKernels{ModuleID: m.ID, Source: m.Kind.String()}
		if m.Path != "" {
			mk.Source += " " + m.Path
		}
		if loadedBeforeAgent(m) {
			mk.Source += " (loaded before the agent)"
		}
		mc, err := p.moduleCode(m, inv)
		if err == nil {
			mk.Kernels = mc.kernels
		}
		mk.Err = err
		sort.Slice(mk.Kernels, func(i, j int) bool { return mk.Kernels[i].Demangled < mk.Kernels[j].Demangled })
		out = append(out, mk)
	}
	return out, nil
}

// kernelsMapped lists the device code in the files process pid maps.
func kernelsMapped(pid int) ([]ModuleKernels, error) {
	ms, err := procmaps.Read(pid)
	if err != nil {
		return nil, err
	}
	var out []ModuleKernels
	for _, obj := range ms.Objects() {
		fbs, err := fatbin.FromELF(procmaps.HostPath(pid, obj))
		if len(fbs) == 0 {
			continue // not ELF, or no device code
		}
		mk := ModuleKernels{Source: "mapped file " + obj + " (no agent in the process)"}
		mk.Kernels, err = fatbin.Inventory(fbs...)
		if len(mk.Kernels) == 0 {
			mk.Err = err
		}
		sort.Slice(mk.Kernels, func(i, j int) bool { return mk.Kernels[i].Demangled < mk.Kernels[j].Demangled })
		out = append(out, mk)
	}
	return out, nil
}
