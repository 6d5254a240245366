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
		CustomHelpTemplate: toolkit.CommandHelp(`sudo gpubpf verify prog.bpf.o         # one line per GPU program: ok, or what to change
sudo gpubpf verify -v -P probe prog.bpf.o  # the verifier's log of a refused program`),
		Description: `Loads a CPU twin of each GPU program into the Linux kernel's verifier, the
check every run makes before a program reaches the GPU: bounded loops, stack,
map value and ctx accesses in bounds, lookups checked for NULL, helper
arguments of the right kind, and no pointer stored where the host reads it.
Prints one line per program; a refused program gets the instruction, the
source line (objects built with clang -g) and what to change. Needs root.`,
		Flags: []cli.Flag{
			programFlag(), oldProgramFlag(),
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
	w, want, refused, n := c.App.Writer, programOf(c), 0, 0
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
		return toolkit.Usagef("%s has no GPU program named %q (%s)", file, want, gpuNames(gpu))
	case n == 0:
		return fmt.Errorf("%s has no GPU programs (sections kprobe/KERNEL, kretprobe/KERNEL, gpu/entry/KERNEL, gpu/exit/KERNEL, gpu/direct)", file)
	case refused > 0:
		return fmt.Errorf("%s: %d of %d GPU programs refused", file, refused, n)
	}
	return nil
}

// programFlag is --program NAME, -P as in gpubpf run (-p is a process id in
// every command).
func programFlag() cli.Flag {
	return &cli.StringFlag{Name: "program", Aliases: []string{"P"}, Usage: "only the GPU program named `NAME`"}
}

// oldProgramFlag keeps -p NAME (what --program was before -p meant a PID
// everywhere) working, with a notice.
func oldProgramFlag() cli.Flag {
	return &cli.StringFlag{Name: "p", Hidden: true, Action: func(c *cli.Context, _ string) error {
		fmt.Fprintf(c.App.ErrWriter, "gpubpf %s: -p NAME is --program (-P) here only for old command lines: write -P NAME (-p is a process id in every other command)\n", c.Command.Name)
		return nil
	}}
}

// programOf is --program, or the old -p.
func programOf(c *cli.Context) string {
	if v := c.String("program"); v != "" {
		return v
	}
	return c.String("p")
}

// gpuNames lists an object's GPU programs, for a message.
func gpuNames(gpu []runtime.GPUProgram) string {
	if len(gpu) == 0 {
		return "it has none"
	}
	names := make([]string, len(gpu))
	for i, g := range gpu {
		names[i] = g.Spec.Name
	}
	return "its GPU programs: " + strings.Join(names, ", ")
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
