package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/olekukonko/tablewriter"
	"github.com/urfave/cli/v2"

	"github.com/gpubpf/gpubpf/pkg/runtime/fatbin"
	"github.com/gpubpf/gpubpf/pkg/runtime/instrument"
	"github.com/gpubpf/gpubpf/pkg/toolkit"
)

func init() {
	register(&cli.Command{
		Name:      "kernels",
		Usage:     "list the CUDA kernels of executables or libraries, with PTX/SASS availability",
		ArgsUsage: "FILE...",
		Description: `Reads every fatbin in FILE's .nv_fatbin and __nv_relfatbin sections (or a raw
fatbin) and lists each kernel: demangled name, whether PTX is present (only
kernels with PTX can be traced) and for which archs, and the SASS archs.

--json prints one object per line: {"file","kernel","mangled","signature",
"ptx","ptx_archs","sass_archs","advice"}.`,
		Flags: []cli.Flag{
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

func kernelsCmd(c *cli.Context) error {
	if c.NArg() == 0 {
		return toolkit.Usagef("gpubpf kernels: name at least one executable, shared library or fatbin")
	}
	out, errw := c.App.Writer, c.App.ErrWriter
	patterns := c.StringSlice(toolkit.FlagKernel)
	for _, file := range c.Args().Slice() {
		fbs, err := readFatbins(file)
		if err != nil {
			return err
		}
		ks, ierr := fatbin.Inventory(fbs...)
		if ierr != nil {
			fmt.Fprintf(errw, "gpubpf kernels: %s: some elements could not be read (their kernels may be missing): %v\n", file, ierr)
		}
		if len(patterns) > 0 {
			var names []string
			for _, k := range ks {
				names = append(names, k.Name)
			}
			matched, closest := instrument.Match(patterns, names)
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
		fmt.Fprintf(out, "%s: %d fatbin(s)\n", file, len(fbs))
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

// readFatbins reads an ELF file's fatbins, or a raw fatbin file.
func readFatbins(file string) ([]*fatbin.Fatbin, error) {
	fbs, err := fatbin.FromELF(file)
	if err == nil {
		return fbs, nil
	}
	if fatbin.IsNoFatbin(err) {
		return nil, err
	}
	b, rerr := readFile(file)
	if rerr != nil {
		return nil, rerr
	}
	if len(b) >= 4 && b[0] == 0x50 && b[1] == 0xed && b[2] == 0x55 && b[3] == 0xba {
		fbs, perr := fatbin.Parse(b)
		if perr != nil {
			return nil, fmt.Errorf("%s: %w", file, perr)
		}
		for _, fb := range fbs {
			fb.Source = file
		}
		return fbs, nil
	}
	return nil, err
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

func readFile(name string) ([]byte, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("gpubpf kernels: %w", err)
	}
	return b, nil
}
