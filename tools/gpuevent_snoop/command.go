package main

import (
	"fmt"
	"os"
	"os/exec"
)

// command is a program started traced. It is created as a shell that waits
// for a byte on fd 3 and then execs the program: the PID is known (and put in
// the BPF filter) before the program runs its first instruction, and stays
// the same across the exec. (pkg/runtime has the same launcher for the
// agent-based tools; this CPU-only tool keeps its own so that it builds on
// its own.)
type command struct {
	cmd     *exec.Cmd
	release *os.File
}

func startCommand(argv []string) (*command, error) {
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return nil, fmt.Errorf("cannot start %s: %w", argv[0], err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("cannot start %s: %w", argv[0], err)
	}
	c := exec.Command("/bin/sh", "-c", `read -r _ <&3; exec 3<&-; exec "$0" "$@"`, path)
	c.Args = append(c.Args, argv[1:]...)
	c.Stdin, c.Stdout, c.Stderr = os.Stdin, os.Stdout, os.Stderr
	c.ExtraFiles = []*os.File{r}
	if err := c.Start(); err != nil {
		r.Close()
		w.Close()
		return nil, fmt.Errorf("cannot start %s: %w", argv[0], err)
	}
	r.Close()
	return &command{cmd: c, release: w}, nil
}

func (c *command) PID() int { return c.cmd.Process.Pid }

// Release lets the program run; idempotent. If the tool fails before, the
// deferred Release still lets it run rather than leave it waiting.
func (c *command) Release() error {
	if c.release == nil {
		return nil
	}
	_, err := c.release.Write([]byte("go\n"))
	c.release.Close()
	c.release = nil
	if err != nil {
		return fmt.Errorf("starting the traced command: %w", err)
	}
	return nil
}
