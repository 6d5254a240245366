package runtime

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
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
	target, cleanup, err := agentPathFor(pid, lib)
	if err != nil {
		return err
	}
	res, err := inject.Inject(pid, target, inject.Options{})
	cleanup() // mapped by now, or not needed
	if err != nil {
		return err
	}
	if !res.AlreadyLoaded {
		what := filepath.Base(lib)
		if target != lib {
			what = fmt.Sprintf("a copy of %s into it (%s in its mount namespace, removed once loaded)", what, target)
		} else {
			what += " into it"
		}
		s.warnf("process %d had no gpubpf agent: loaded %s (thread %d stopped %.1f ms); --no-inject refuses instead",
			pid, what, res.Thread, float64(res.Stopped)/float64(time.Millisecond))
	}
	return nil
}

// agentPathFor is the agent library as process pid sees it: lib itself
// where pid shares the tool's mount namespace or sees the same file there;
// in a container, a copy the tool writes into the container's filesystem,
// where it is writable and not mounted noexec (/tmp, /var/tmp, /dev/shm).
// cleanup removes the copy (the process keeps it mapped).
func agentPathFor(pid int, lib string) (path string, cleanup func(), err error) {
	none := func() {}
	if procmaps.SameNamespace(pid, "mnt") {
		return lib, none, nil
	}
	if a, err := os.Stat(lib); err == nil {
		if b, err := os.Stat(fmt.Sprintf("/proc/%d/root%s", pid, lib)); err == nil && os.SameFile(a, b) {
			return lib, none, nil
		}
	}
	data, err := os.ReadFile(lib)
	if err != nil {
		return "", nil, err
	}
	sum := sha256.Sum256(data)
	name := fmt.Sprintf("gpubpf-agent-%x.so", sum[:8])
	var last error
	for _, dir := range []string{"/tmp", "/var/tmp", "/dev/shm"} {
		if noexec(pid, dir) {
			last = fmt.Errorf("%s is mounted noexec", dir)
			continue
		}
		host := fmt.Sprintf("/proc/%d/root%s/%s", pid, dir, name)
		if err := os.WriteFile(host+".tmp", data, 0o755); err != nil {
			last = err
			continue
		}
		if err := os.Rename(host+".tmp", host); err != nil {
			os.Remove(host + ".tmp")
			last = err
			continue
		}
		return dir + "/" + name, func() { os.Remove(host) }, nil
	}
	return "", nil, fmt.Errorf("process %d runs in another mount namespace (a container) where the agent library is not, and the tool found no place to copy it to (/tmp, /var/tmp, /dev/shm: %w); start the program with the agent (LD_PRELOAD) instead", pid, last)
}

// noexec reports whether dir lies on a mount that pid sees as noexec.
func noexec(pid int, dir string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		return false
	}
	best, opts := -1, ""
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 {
			continue
		}
		mp := f[4]
		if (dir == mp || strings.HasPrefix(dir, strings.TrimSuffix(mp, "/")+"/")) && len(mp) > best {
			best, opts = len(mp), f[5]
		}
	}
	return slices.Contains(strings.Split(opts, ","), "noexec")
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

// lateTargeted reports whether a loaded module of inv that was loaded
// before the agent has a kernel the session targets: its code is still to
// be found in the process's files.
func (p *Process) lateTargeted(inv *agentproto.Inventory) bool {
	for _, m := range inv.Modules {
		if !m.Unloaded && loadedBeforeAgent(m) && p.anyTargeted(m.ID, inv) {
			return true
		}
	}
	return false
}

// lateReadIsSlow: with KernelTimesWhenNeeded, whether CUPTI comes on in p
// before the code of modules loaded before the agent (-p) is read, rather
// than once a kernel without PTX is found in it. That code is read from the
// process's files, which on PyTorch (GBs of libraries) outlasted an 8 s
// trace on the H200 (2026-11-28): CUPTI came on after the trace had ended.
// Where there is that much to read (libraries' SASS, mostly) it comes on
// first; a program with a little device code of its own is read first,
// and pays for CUPTI only if a kernel of it has no PTX. Decided once per
// process, at its first such module.
func (p *Process) lateReadIsSlow() bool {
	if p.s.opts.KernelTimes != KernelTimesWhenNeeded {
		return false
	}
	p.lateSlowOnce.Do(func() { p.lateSlow = p.lateReadBytes() > lateReadSlow })
	return p.lateSlow
}

// cuptiBeforeReading: CUPTI is to be turned on in p before module m's code
// is read (m loaded before the agent, much such code to read, CUPTI not on
// yet).
func (p *Process) cuptiBeforeReading(m agentproto.Module) bool {
	return loadedBeforeAgent(m) && !p.kernelTimesOn() && p.lateReadIsSlow()
}

// lateReadSlow is the device code, in bytes, in the files a process maps
// past which reading it (for modules loaded before the agent) takes long
// enough to miss launches: about a quarter second of one core.
const lateReadSlow = 64 << 20

// lateReadBytes is the device code in the files process p maps that the
// session has not indexed yet, from their section headers. The driver's
// own libraries hold no module of the program's and are left out.
func (p *Process) lateReadBytes() int64 {
	ms, err := procmaps.Read(p.PID)
	if err != nil {
		return 0
	}
	isCuda := procmaps.LibraryMatcher("libcuda.so")
	var n int64
	for _, obj := range ms.Objects() {
		if isCuda(obj) || strings.HasPrefix(filepath.Base(obj), "libnvidia-") {
			continue
		}
		if path := procmaps.HostPath(p.PID, obj); !p.s.fatbins.indexed(path) {
			n += fatbin.DeviceCodeBytes(path)
		}
	}
	return n
}

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
		path := procmaps.HostPath(p.PID, obj)
		var offs []int64
		for _, c := range p.mappedFatbins(path) {
			if slices.ContainsFunc(c.kernels, func(k string) bool { return want[k] }) {
				offs = append(offs, c.off)
			}
		}
		if len(offs) == 0 {
			continue
		}
		fbs, err := readContainers(path, offs)
		if err != nil {
			return nil, err
		}
		out = fbs
		break // the first object that has them, as the loader would
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

// fatbinCache: which kernels each fatbin container of the files processes
// map defines, and where it lies in its file, worked out once per session
// (PyTorch's libraries are searched for every module they hold). Only the
// names stay: the containers a module needs are read again from the file
// (a few MB), where keeping them all would hold a gigabyte of libtorch's.
type fatbinCache struct {
	mu    sync.Mutex
	files map[string][]containerKernels
}

// indexed reports whether path's index is in the cache.
func (c *fatbinCache) indexed(path string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.files[path]
	return ok
}

// containerKernels is one container of a file: its offset there and the
// kernels it defines.
type containerKernels struct {
	off     int64
	kernels []string
}

// mappedFatbins is the index of the device code of a file the process
// maps, through the session's cache (worked out each time for a one-off
// listing: gpubpf kernels).
func (p *Process) mappedFatbins(path string) []containerKernels {
	if p.s == nil {
		return indexFatbins(path)
	}
	c := &p.s.fatbins
	c.mu.Lock()
	defer c.mu.Unlock()
	if idx, ok := c.files[path]; ok {
		return idx
	}
	if c.files == nil {
		c.files = map[string][]containerKernels{}
	}
	idx := indexFatbins(path)
	c.files[path] = idx
	return idx
}

// indexFatbins lists the containers of path with their kernels; nothing
// for a file that is not ELF or has no device code (or one whose section is
// compressed: no container has a file offset to be read again at). The
// containers' elements are decompressed and parsed by a few workers: a
// library of PyTorch's holds hundreds of MB of them, and a -p trace waits
// for the index before it instruments anything.
func indexFatbins(path string) []containerKernels {
	fbs, _ := fatbin.FromELF(path)
	fbs = slices.DeleteFunc(fbs, func(fb *fatbin.Fatbin) bool { return fb.FileOffset == 0 })
	idx := make([]containerKernels, len(fbs))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(indexWorkers(), len(fbs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				names, _ := fatbin.KernelNames(fbs[i])
				idx[i] = containerKernels{off: fbs[i].FileOffset, kernels: names}
			}
		}()
	}
	for i := range fbs {
		next <- i
	}
	close(next)
	wg.Wait()
	return idx
}

// indexWorkers is how many CPUs an index may take: half of those the tool
// may use, at most 8, so that attaching leaves the traced program's own
// CPU work (data loaders, the launch thread) room.
func indexWorkers() int {
	return max(1, min(8, goruntime.GOMAXPROCS(0)/2))
}

// readContainers reads the containers at offs of path.
func readContainers(path string, offs []int64) ([]*fatbin.Fatbin, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading its device code again from %s: %w", path, err)
	}
	defer f.Close()
	out := make([]*fatbin.Fatbin, 0, len(offs))
	for _, off := range offs {
		fb, err := fatbin.ReadContainerAt(f, off, path)
		if err != nil {
			return nil, fmt.Errorf("reading its device code again: %w", err)
		}
		out = append(out, fb)
	}
	return out, nil
}
