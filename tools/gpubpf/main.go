// Command gpubpf is the suite's umbrella command: it runs any GPU eBPF
// object, lists the kernels of a binary and prints the PTX the compiler
// makes. Each subcommand lives in its own file and registers itself here.
package main

import (
	"sort"

	"github.com/urfave/cli/v2"

	"github.com/gpubpf/gpubpf/pkg/toolkit"
)

// commands is filled by the init functions of the cmd_*.go files.
var commands []*cli.Command

func register(c *cli.Command) { commands = append(commands, c) }

const examples = `gpubpf kernels ./vec_add              # kernels of a binary, with PTX/SASS status
gpubpf ptx prog.bpf.o                  # PTX the compiler makes for each GPU program
sudo gpubpf run prog.bpf.o -- ./vec_add  # run a GPU eBPF object against a program
gpubpf run --direct --threads 1048576 --map 'vec_N=[1048576]' bpf/examples/direct_run_bpfel.o
                                       # run direct programs as kernels of their own`

func newApp() *cli.App {
	app := toolkit.NewApp("gpubpf", "run GPU eBPF programs and inspect CUDA binaries", examples)
	sort.Slice(commands, func(i, j int) bool { return commands[i].Name < commands[j].Name })
	app.Commands = commands
	return app
}

func main() {
	toolkit.Run(newApp())
}
