// Command gpubpf is the suite in one binary (busybox style): run under a
// tool's name (a link to it, as `make install` puts them) or as `gpubpf
// TOOL ...` it is that tool, exactly; else it is the umbrella command that
// runs any GPU eBPF object, lists the kernels of a binary and prints the
// PTX the compiler makes. Each umbrella subcommand lives in its own file
// and registers itself here.
package main

import (
	"os"
	"path/filepath"
	"sort"

	"github.com/urfave/cli/v2"

	"github.com/gpubpf/gpubpf/pkg/toolkit"
	"github.com/gpubpf/gpubpf/tools/gpuevent_snoop"
	"github.com/gpubpf/gpubpf/tools/kernel_trace"
	"github.com/gpubpf/gpubpf/tools/kernelretsnoop"
	"github.com/gpubpf/gpubpf/tools/launchlate"
	"github.com/gpubpf/gpubpf/tools/threadhist"
)

// commands is filled by the init functions of the cmd_*.go files.
var commands []*cli.Command

func register(c *cli.Command) { commands = append(commands, c) }

// tools are the suite's tools, each a whole command of its own.
var tools = map[string]func() *cli.App{
	"gpuevent_snoop": gpuevent_snoop.App,
	"kernel_trace":   kernel_trace.App,
	"kernelretsnoop": kernelretsnoop.App,
	"launchlate":     launchlate.App,
	"threadhist":     threadhist.App,
}

const examples = `gpubpf kernels ./vec_add              # kernels of a binary, with PTX/SASS status
gpubpf ptx prog.bpf.o                  # PTX the compiler makes for each GPU program
sudo gpubpf run prog.bpf.o -- ./vec_add  # run a GPU eBPF object against a program
sudo gpubpf threadhist -- ./vec_add    # a tool (also installed as threadhist)
gpubpf run --direct --threads 1048576 --map 'vec_N=[1048576]' bpf/examples/direct_run_bpfel.o
                                       # run direct programs as kernels of their own`

func newApp() *cli.App {
	app := toolkit.NewApp("gpubpf", "run GPU eBPF programs and inspect CUDA binaries; the suite's tools", examples)
	cmds := append([]*cli.Command(nil), commands...)
	for name, mk := range tools {
		// listed in the help; main hands the arguments to the tool
		// itself before this app parses them
		cmds = append(cmds, &cli.Command{Name: name, Usage: mk().Usage, Category: "tools",
			SkipFlagParsing: true, HideHelpCommand: true,
			Action: func(c *cli.Context) error {
				return exitWith(toolkit.RunArgs(tools[name](), append([]string{name}, c.Args().Slice()...), os.Stderr))
			}})
	}
	sort.Slice(cmds, func(i, j int) bool { return cmds[i].Name < cmds[j].Name })
	app.Commands = cmds
	app.Action = func(c *cli.Context) error {
		if c.NArg() > 0 {
			return toolkit.Usagef("no command %q: gpubpf --help lists them", c.Args().First())
		}
		return cli.ShowAppHelp(c)
	}
	return app
}

// helpArgs turns gpubpf help [CMD] into gpubpf [CMD] --help.
func helpArgs(args []string) []string {
	if len(args) < 2 || args[1] != "help" {
		return args
	}
	return append(append([]string{args[0]}, args[2:min(len(args), 3)]...), "--help")
}

// exitWith passes a tool's exit status on through the umbrella app.
func exitWith(code int) error {
	if code == 0 {
		return nil
	}
	return cli.Exit("", code)
}

// tool is the tool args name: the program's own name (a link), or its
// first argument (gpubpf TOOL ...); the tool's arguments come with it.
func tool(args []string) (func() *cli.App, []string) {
	if mk, ok := tools[filepath.Base(args[0])]; ok {
		return mk, args
	}
	if len(args) > 1 {
		if mk, ok := tools[args[1]]; ok {
			return mk, args[1:]
		}
	}
	return nil, nil
}

func main() {
	args := helpArgs(os.Args)
	if mk, targs := tool(args); mk != nil {
		os.Exit(toolkit.RunArgs(mk(), targs, os.Stderr))
	}
	os.Exit(toolkit.RunArgs(newApp(), args, os.Stderr))
}
