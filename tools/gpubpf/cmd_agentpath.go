package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/gpubpf/gpubpf/pkg/runtime/agentlib"
)

func init() {
	register(&cli.Command{
		Name:  "agent-path",
		Usage: "print the path of the gpubpf agent library to preload into a CUDA program",
		Description: `Prints the agent library the tools preload when they start a command:
the one next to the tool, in /usr/local/lib/gpubpf or /usr/lib/gpubpf, or
the copy embedded in the tool, written once to /run/gpubpf/lib. Start a
program so that tools can attach to it later with -p:

    LD_PRELOAD=$(gpubpf agent-path) ./app`,
		Action: func(c *cli.Context) error {
			p, err := agentlib.Path()
			if err != nil {
				return err
			}
			fmt.Fprintln(c.App.Writer, p)
			return nil
		},
	})
}
