package runtime

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/gpubpf/gpubpf/pkg/inject"
	"github.com/gpubpf/gpubpf/pkg/procmaps"
	"github.com/gpubpf/gpubpf/pkg/runtime/agentclient"
	"github.com/gpubpf/gpubpf/pkg/runtime/agentlib"
	"github.com/gpubpf/gpubpf/pkg/runtime/agentproto"
	"github.com/gpubpf/gpubpf/pkg/runtime/fatbin"
)

// injectAgent loads the agent into running process pid, which has none,
// and says so on the warning stream (a tool attaching with -p to a
// process started without the agent).
func (s *Session) injectAgent(pid int) error {
	lib, err := agentlib.Path()
	if err != nil {
		return err
	}
	res, err := inject.Inject(pid, lib, inject.Options{})
	if err != nil {
		return err
	}
	if !res.AlreadyLoaded {
		s.warnf("process %d had no gpubpf agent: loaded %s into it (thread %d stopped %.1f ms); --no-inject refuses instead",
			pid, filepath.Base(lib), res.Thread, float64(res.Stopped)/float64(time.Millisecond))
	}
	return nil
}

// dialOrInject connects to pid's agent; a running process without one gets
// it injected (unless the session says not to).
func (s *Session) dialOrInject(p *Process, opts AttachOptions, copts agentclient.Options) (*agentclient.Conn, error) {
	conn, err := dialAgent(opts.Context, p.PID, copts, opts.Wait)
	var na *agentclient.NoAgentError
	if err == nil || opts.Hold || s.opts.NoInject || !errors.As(err, &na) {
		return conn, err
	}
	// Only a CUDA process gets the agent: a mistyped -p (init, a shell)
	// must never be ptrace'd and changed.
	ms, merr := procmaps.Read(p.PID)
	if errors.Is(merr, procmaps.ErrNoProcess) {
		return nil, fmt.Errorf("process %d has exited", p.PID)
	}
	if merr != nil || len(ms.Matching(procmaps.LibraryMatcher("libcuda.so"))) == 0 {
		return nil, fmt.Errorf("%w; it has not loaded libcuda (not a CUDA program, or one that has not touched the GPU yet), so the agent was not loaded into it", err)
	}
	if ierr := s.injectAgent(p.PID); ierr != nil {
		return nil, fmt.Errorf("%w; loading the agent into it failed: %w", err, ierr)
	}
	return dialAgent(opts.Context, p.PID, copts, 2*time.Second)
}

// loadedBeforeAgent reports a module the agent learnt of after it was
// loaded (the agent was injected later): it has neither an image nor a file.
func loadedBeforeAgent(m agentproto.Module) bool { return m.Size == 0 && m.Path == "" }

// lateFatbins finds the code of a module that was loaded before the agent
// (the agent knows its kernels, not its image): the fatbin containers, in
// the files the process maps, that define the module's kernels.
func (p *Process) lateFatbins(m agentproto.Module, inv *agentproto.Inventory) ([]*fatbin.Fatbin, error) {
	if inv == nil {
		return nil, fmt.Errorf("loaded before the agent, and the agent listed none of its kernels")
	}
	want := map[string]bool{}
	for _, k := range inv.Kernels {
		if k.ModuleID == m.ID && k.Name != "" {
			want[k.Name] = true
		}
	}
	if len(want) == 0 {
		return nil, fmt.Errorf("loaded before the agent, and none of its kernels has been launched yet")
	}
	ms, err := procmaps.Read(p.PID)
	if err != nil {
		return nil, err
	}
	var out []*fatbin.Fatbin
	for _, obj := range ms.Objects() {
		for _, fb := range p.mappedFatbins(procmaps.HostPath(p.PID, obj)) {
			for _, k := range fatbin.Kernels(fb) {
				if want[k.Name] {
					out = append(out, fb)
					break
				}
			}
		}
		if len(out) > 0 {
			break // the first object that has them, as the loader would
		}
	}
	if len(out) == 0 {
		names := make([]string, 0, len(want))
		for n := range want {
			names = append(names, n)
		}
		return nil, fmt.Errorf("loaded before the agent, from memory (no file the process maps holds %s): its kernels cannot be instrumented in this run; start the program with the agent (LD_PRELOAD) to trace them",
			strings.Join(names, ", "))
	}
	return out, nil
}

// fatbinCache: the device code of the files processes map, read once per
// session (PyTorch's libraries are read for every module they hold).
type fatbinCache struct {
	mu    sync.Mutex
	files map[string][]*fatbin.Fatbin
}

// mappedFatbins is the device code of a file the process maps, through the
// session's cache (none for a one-off listing: gpubpf kernels).
func (p *Process) mappedFatbins(path string) []*fatbin.Fatbin {
	if p.s == nil {
		fbs, _ := fatbin.FromELF(path)
		return fbs
	}
	c := &p.s.fatbins
	c.mu.Lock()
	defer c.mu.Unlock()
	if fbs, ok := c.files[path]; ok {
		return fbs
	}
	if c.files == nil {
		c.files = map[string][]*fatbin.Fatbin{}
	}
	fbs, _ := fatbin.FromELF(path) // not ELF, or no device code: nothing
	c.files[path] = fbs
	return fbs
}
