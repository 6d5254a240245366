package main

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/olekukonko/tablewriter"
	"github.com/urfave/cli/v2"

	"github.com/gpubpf/gpubpf/pkg/runtime"
	"github.com/gpubpf/gpubpf/pkg/runtime/fatbin"
	"github.com/gpubpf/gpubpf/pkg/runtime/instrument"
	"github.com/gpubpf/gpubpf/pkg/toolkit"
)

func init() {
	register(&cli.Command{
		Name:      "kernels",
		Usage:     "list the CUDA kernels of executables or libraries, with PTX/SASS availability",
		ArgsUsage: "FILE... | -p PID",
		CustomHelpTemplate: toolkit.CommandHelp(`gpubpf kernels ./vec_add                # its kernels, PTX or SASS only
gpubpf kernels -p 4242                  # the modules a running process has loaded`),
		Description: `Reads every fatbin in FILE's .nv_fatbin and __nv_relfatbin sections (or a raw
fatbin), or with -p every module a running process has loaded (through its
gpubpf agent: what the driver really got, PyTorch's libraries included), and
lists each kernel: demangled name, whether PTX is present (only
kernels with PTX can be traced) and for which archs, and the SASS archs.

--json prints one object per line: {"file","kernel","mangled","signature",
"ptx","ptx_archs","sass_archs","advice"}.`,
		Flags: []cli.Flag{
			&cli.IntSliceFlag{Name: toolkit.FlagPID, Aliases: []string{"p"}, Usage: "list the modules process `PID` has loaded (through its gpubpf agent; without one: the device code of the files it maps)"},
			&cli.StringSliceFlag{Name: toolkit.FlagKernel, Aliases: []string{"k"}, Usage: "only kernels matching `PATTERN` (mangled, demangled or glob; may repeat)"},
			&cli.BoolFlag{Name: toolkit.FlagJSON, Aliases: []string{"j"}, Usage: "one JSON object per line"},
			&cli.BoolFlag{Name: toolkit.FlagVerbose, Aliases: []string{"v"}, Usage: "also show mangled names and each fatbin element"},
		},
		Action: kernelsCmd,
	})
}

// kernelJSON is the --json record; field names are stable.
type kernelJSON struct {
	File      string   `json:"file"`
	Kernel    string   `json:"kernel"`
	Mangled   string   `json:"mangled"`
	Signature string   `json:"signature"`
	PTX       bool     `json:"ptx"`
	PTXArchs  []string `json:"ptx_archs"`
	SASSArchs []string `json:"sass_archs"`
	Advice    string   `json:"advice,omitempty"`
}

// kernelSource is one file, or one module of a process, to list.
type kernelSource struct {
	name    string
	fatbins []*fatbin.Fatbin // nil for modules of a process
	kernels []fatbin.Kernel
}

// kernelSources reads what the command line names.
func kernelSources(c *cli.Context) ([]kernelSource, error) {
	var out []kernelSource
	errw := c.App.ErrWriter
	for _, pid := range c.IntSlice(toolkit.FlagPID) {
		mods, err := runtime.KernelsOf(pid)
		if err != nil {
			return nil, err
		}
		if len(mods) == 0 {
			fmt.Fprintf(errw, "gpubpf kernels: process %d has loaded no CUDA module yet\n", pid)
		}
		for _, m := range mods {
			name := fmt.Sprintf("PID %d module %d (%s)", pid, m.ModuleID, m.Source)
			if m.ModuleID == 0 {
				name = fmt.Sprintf("PID %d %s", pid, m.Source)
			}
			if m.Err != nil {
				fmt.Fprintf(errw, "gpubpf kernels: %s: %v\n", name, m.Err)
				continue
			}
			out = append(out, kernelSource{name: name, kernels: m.Kernels})
		}
	}
	for _, file := range c.Args().Slice() {
		fbs, err := fatbin.FromFile(file)
		if err != nil {
			return nil, err
		}
		ks, ierr := fatbin.Inventory(fbs...)
		if ierr != nil {
			fmt.Fprintf(errw, "gpubpf kernels: %s: some elements could not be read (their kernels may be missing): %v\n", file, ierr)
		}
		out = append(out, kernelSource{name: file, fatbins: fbs, kernels: ks})
	}
	return out, nil
}

func kernelsCmd(c *cli.Context) error {
	if c.NArg() == 0 && len(c.IntSlice(toolkit.FlagPID)) == 0 {
		return toolkit.Usagef("gpubpf kernels: name at least one executable, shared library or fatbin, or a process with -p PID")
	}
	out, errw := c.App.Writer, c.App.ErrWriter
	patterns := c.StringSlice(toolkit.FlagKernel)
	sources, err := kernelSources(c)
	if err != nil {
		return err
	}
	for _, src := range sources {
		file, fbs, ks := src.name, src.fatbins, src.kernels
		if len(patterns) > 0 {
			var names []string
			for _, k := range ks {
				names = append(names, k.Name)
			}
			matched, closest := instrument.Match(patterns, names)
			if len(matched) == 0 && fbs == nil {
				continue // one of a process's many modules
			}
			if len(matched) == 0 {
				msg := fmt.Sprintf("%s: no kernel matches %s", file, strings.Join(patterns, ", "))
				if len(closest) > 0 {
					var cs []string
					for _, n := range closest {
						base, _ := fatbin.Demangle(n)
						cs = append(cs, base+" ("+n+")")
					}
					msg += "; closest: " + strings.Join(cs, ", ")
				}
				return fmt.Errorf("%s", msg)
			}
			keep := map[string]bool{}
			for _, m := range matched {
				keep[m] = true
			}
			var sel []fatbin.Kernel
			for _, k := range ks {
				if keep[k.Name] {
					sel = append(sel, k)
				}
			}
			ks = sel
		}
		if c.Bool(toolkit.FlagJSON) {
			enc := json.NewEncoder(out)
			enc.SetEscapeHTML(false) // template arguments: keep < and > readable
			for _, k := range ks {
				rec := kernelJSON{File: file, Kernel: k.Demangled, Mangled: k.Name, Signature: k.Signature, PTX: k.HasPTX,
					PTXArchs: nonNil(k.PTXArchs), SASSArchs: nonNil(k.SASSArchs), Advice: k.Advice()}
				if err := enc.Encode(rec); err != nil {
					return err
				}
			}
			continue
		}
		if c.Bool(toolkit.FlagVerbose) {
			for _, fb := range fbs {
				for _, e := range fb.Elements {
					fmt.Fprintf(out, "%s: element at %#x: %s %s, ISA/format %d.%d, %s, %d bytes stored, flags %#x\n",
						fb.Source, e.Offset, e.Kind, e.Arch(), e.Major, e.Minor, e.Compression(), len(e.Stored()), e.Flags)
				}
			}
		}
		header := []string{"KERNEL", "PTX", "SASS"}
		if c.Bool(toolkit.FlagVerbose) {
			header = append(header, "MANGLED")
		}
		table := tablewriter.NewTable(out)
		table.Header(header)
		ptxN := 0
		for _, k := range ks {
			p := "no"
			if k.HasPTX {
				p = "yes " + strings.Join(k.PTXArchs, ",")
				ptxN++
			}
			s := strings.Join(k.SASSArchs, ",")
			if s == "" {
				s = "-"
			}
			row := []string{clip(k.Signature, 60), p, s}
			if c.Bool(toolkit.FlagVerbose) {
				row = append(row, k.Name)
			}
			if err := table.Append(row); err != nil {
				return fmt.Errorf("rendering the kernel table: %w", err)
			}
		}
		if fbs != nil {
			fmt.Fprintf(out, "%s: %d fatbin(s)\n", file, len(fbs))
		} else {
			fmt.Fprintf(out, "%s:\n", file)
		}
		if err := table.Render(); err != nil {
			return fmt.Errorf("rendering the kernel table: %w", err)
		}
		fmt.Fprintf(out, "%d kernels: %d traceable (PTX), %d SASS only\n", len(ks), ptxN, len(ks)-ptxN)
		for _, k := range ks {
			if a := k.Advice(); a != "" {
				fmt.Fprintln(errw, a)
			}
		}
	}
	return nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}
