// Package launch starts the programs a tool traces (TOOL -- CMD ARGS): held
// before exec until the tool is ready, optionally with the gpubpf agent
// preloaded.
package launch

import (
	"fmt"
	"os"
	"os/exec"

	"github.com/gpubpf/gpubpf/pkg/runtime/agentlib"
)

// Command is a program a tool starts traced (TOOL [flags] -- CMD ARGS).
type Command struct {
	Cmd *exec.Cmd
	// release lets the child exec CMD; until then it waits, so the tool can
	// attach uprobes to it before its first CUDA call.
	release *os.File
}

// Options say how to start a traced command.
type Options struct {
	// Agent preloads the gpubpf agent (GPU-side tools). CPU-only tools
	// (gpuevent_snoop) start the command without it.
	Agent bool
	// Hold makes the agent wait, at each module load, until the tool has
	// had the chance to instrument the module (at most HoldTimeout), so the
	// very first launch of a kernel already runs instrumented.
	Hold bool
	// AgentLib overrides where the agent library is (default: agentlib.Path).
	AgentLib string
	// Env is added to the command's environment (the direct-run host:
	// the agent library itself, started with GPUBPF_AGENT_DIRECT=1).
	Env []string
}

// Start starts argv with its stdio passed through. The child is
// created stopped before exec: call Release once the tool is ready (uprobes
// attached), so nothing the program does escapes the trace. PID is known
// from the moment StartCommand returns.
func Start(argv []string, opts Options) (*Command, error) {
	if len(argv) == 0 {
		return nil, fmt.Errorf("no command given after --")
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return nil, fmt.Errorf("cannot start %s: %w", argv[0], err)
	}
	env := append(os.Environ(), opts.Env...)
	if opts.Agent {
		lib := opts.AgentLib
		if lib == "" {
			var err error
			if lib, err = agentlib.Path(); err != nil {
				return nil, err
			}
		}
		// The waiting sh must not load the agent (it would serve the
		// socket under the same PID until the exec): the preload is put
		// in place by sh right before it execs CMD.
		env = append(env, preloadVar+"="+lib)
		if opts.Hold {
			env = append(env, "GPUBPF_AGENT_HOLD=1")
		}
	}
	// The child starts as a one-line sh that waits for a byte on fd 3 and
	// then execs the command: same PID throughout, so uprobes filtered on
	// that PID and the agent's socket name are known before CMD runs.
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("/bin/sh", "-c", gateScript, path)
	cmd.Args = append(cmd.Args, argv[1:]...)
	cmd.Env = env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.ExtraFiles = []*os.File{r}
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		return nil, fmt.Errorf("cannot start %s: %w", argv[0], err)
	}
	r.Close()
	return &Command{Cmd: cmd, release: w}, nil
}

// PID of the traced command (the same process after its exec).
func (c *Command) PID() int { return c.Cmd.Process.Pid }

// Release lets the command run.
func (c *Command) Release() error {
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

// Wait releases the command if needed and waits for it to exit.
func (c *Command) Wait() error {
	c.Release()
	return c.Cmd.Wait()
}

// preloadVar carries the agent's path to the gate script.
const preloadVar = "GPUBPF_PRELOAD"

// gateScript waits for the tool's go-ahead on fd 3, prepends the agent to
// LD_PRELOAD if asked to, and execs the command (same PID).
const gateScript = `read -r _ <&3; exec 3<&-
if [ -n "$` + preloadVar + `" ]; then LD_PRELOAD="$` + preloadVar + `${LD_PRELOAD:+:$LD_PRELOAD}"; export LD_PRELOAD; fi
unset ` + preloadVar + `
exec "$0" "$@"`
