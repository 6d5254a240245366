package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/urfave/cli/v2"

	"github.com/gpubpf/gpubpf/pkg/runtime"
	"github.com/gpubpf/gpubpf/pkg/runtime/verify"
	"github.com/gpubpf/gpubpf/pkg/toolkit"
)

func init() {
	register(&cli.Command{
		Name:      "verify",
		Usage:     "check every GPU program of an eBPF object with the kernel's verifier",
		ArgsUsage: "PROG.bpf.o",
		Description: `Loads a CPU twin of each GPU program into the Linux kernel's verifier, the
check every run makes before a program reaches the GPU: bounded loops, stack,
map value and ctx accesses in bounds, lookups checked for NULL, helper
arguments of the right kind, and no pointer stored where the host reads it.
Prints one line per program; a refused program gets the instruction, the
source line (objects built with clang -g) and what to change. Needs root.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "program", Aliases: []string{"p"}, Usage: "only the GPU program named `NAME`"},
			&cli.BoolFlag{Name: toolkit.FlagVerbose, Aliases: []string{"v"}, Usage: "print the verifier's log of a refused program"},
		},
		Action: verifyCmd,
	})
}

func verifyCmd(c *cli.Context) error {
	file, spec, gpu, err := gpuObject(c)
	if err != nil {
		return err
	}
	w, want, refused, n := c.App.Writer, c.String("program"), 0, 0
	for _, g := range gpu {
		if want != "" && g.Spec.Name != want {
			continue
		}
		n++
		v, err := verify.Judge(spec, g.Spec, verify.Options{Direct: g.Direct()})
		var e *verify.Error
		switch {
		case err == nil && v.LoopBudget:
			fmt.Fprintf(w, "%s (%s): ok, memory-safe however long its loops run; their bounds come from data, so each runs with an iteration budget (gpubpf run --loop-budget, default %d per call)\n",
				g.Spec.Name, g.Spec.SectionName, runtime.DefaultLoopBudget)
		case err == nil:
			fmt.Fprintf(w, "%s (%s): ok\n", g.Spec.Name, g.Spec.SectionName)
		case errors.Is(err, verify.ErrPrivileges):
			return err
		default:
			refused++
			fmt.Fprintf(w, "%s (%s): REFUSED: %v\n", g.Spec.Name, g.Spec.SectionName, err)
			if errors.As(err, &e) && c.Bool(toolkit.FlagVerbose) && len(e.Log) > 0 {
				fmt.Fprintf(w, "  verifier log:\n    %s\n", strings.Join(e.Log, "\n    "))
			}
		}
	}
	switch {
	case n == 0 && want != "":
		return fmt.Errorf("%s has no GPU program named %q", file, want)
	case n == 0:
		return fmt.Errorf("%s has no GPU programs (sections kprobe/KERNEL, kretprobe/KERNEL, gpu/entry/KERNEL, gpu/exit/KERNEL, gpu/direct)", file)
	case refused > 0:
		return fmt.Errorf("%s: %d of %d GPU programs refused", file, refused, n)
	}
	return nil
}

// gpuObject reads the one eBPF object a command names and sorts its
// programs.
func gpuObject(c *cli.Context) (string, *ebpf.CollectionSpec, []runtime.GPUProgram, error) {
	if c.NArg() != 1 {
		return "", nil, nil, toolkit.Usagef("gpubpf %s needs one BPF object: gpubpf %s PROG.bpf.o", c.Command.Name, c.Command.Name)
	}
	file := c.Args().First()
	spec, err := loadObject(file)
	if err != nil {
		return "", nil, nil, err
	}
	gpu, _, err := runtime.SplitPrograms(spec)
	if err != nil {
		return "", nil, nil, fmt.Errorf("%s: %w", file, err)
	}
	return file, spec, gpu, nil
}
