package gpuevent_snoop

import (
	"encoding/binary"
	"fmt"
	"os"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/gpubpf/gpubpf/pkg/procmaps"
	"github.com/gpubpf/gpubpf/pkg/symbolize"
)

// Resolver names addresses of traced processes: kernel host stubs and call
// sites. Results are cached per (pid, address), so a hot loop costs one map
// lookup per event. Mappings are re-read when an address falls outside the
// known ones (a library loaded since), and kept after the process exits so
// late events still resolve.
type Resolver struct {
	mu    sync.Mutex
	sym   *symbolize.Symbolizer
	procs map[uint32]*procInfo
	names map[pidAddr]*Kernel
	sites map[pidAddr]string
	// handles maps kernel handles (CUkernel, CUfunction) to mangled names,
	// from the lookups the BPF side reports; funcKernel maps a CUfunction
	// from cuKernelGetFunction to its CUkernel.
	handles    map[pidAddr]string
	funcKernel map[pidAddr]uint64
	// objects gives the probed object an event's cookie names, for the
	// fallback when the process's mappings cannot be read (it exited).
	objects func(i int) (*symbolize.Object, string)
	// exes: each process's executable (host path, and as the process
	// sees it), for the same fallback when no probe is in it (shared
	// cudart): its load bias comes with each event (Event.ExeStart).
	exes map[uint32][2]string
}

type pidAddr struct {
	pid  uint32
	addr uint64
}

type procInfo struct {
	maps   procmaps.Maps
	readAt time.Time
	gone   bool
	// stubsRead: the kernel handles in the process's host-stub statics
	// have been read (once, for a tool that attached after the lookups).
	stubsRead bool
}

// Kernel is a launched function's name.
type Kernel struct {
	Mangled   string // symbol as in the binary, "" when unknown
	Demangled string // with parameters
	Short     string // without parameters: what the live stream shows
}

// NewResolver returns an empty resolver.
func NewResolver() *Resolver {
	return &Resolver{
		sym:   symbolize.New(),
		procs: map[uint32]*procInfo{},
		names: map[pidAddr]*Kernel{},
		sites: map[pidAddr]string{},

		handles:    map[pidAddr]string{},
		funcKernel: map[pidAddr]uint64{},
		exes:       map[uint32][2]string{},
	}
}

// SetExe records a process's executable: hostPath opens it here, shown is
// the path the process sees.
func (r *Resolver) SetExe(pid uint32, hostPath, shown string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.exes[pid] = [2]string{hostPath, shown}
}

// AddLookup records what a kernel-handle lookup returned. Launches seen
// before it (a tool attached to a running process) may have been cached as
// unnamed: they are named from now on.
func (r *Resolver) AddLookup(l *Lookup) {
	if l.Ret != 0 || l.Handle == 0 {
		return
	}
	key := pidAddr{l.PID, l.Handle}
	if l.Name != "" {
		r.handles[key] = l.Name
	} else {
		r.funcKernel[key] = l.Parent
	}
	delete(r.names, key)
	delete(r.names, pidAddr{l.PID, l.Handle | 1<<63})
}

// handleName returns the kernel name a lookup gave for a handle.
func (r *Resolver) handleName(pid uint32, h uint64) (string, bool) {
	if n, ok := r.handles[pidAddr{pid, h}]; ok {
		return n, true
	}
	if k, ok := r.funcKernel[pidAddr{pid, h}]; ok {
		n, ok := r.handles[pidAddr{pid, k}]
		return n, ok
	}
	return "", false
}

// Prime reads (or re-reads) a process's mappings now, while it is alive.
func (r *Resolver) Prime(pid uint32) {
	ms, err := procmaps.Read(int(pid))
	r.mu.Lock()
	defer r.mu.Unlock()
	pi := r.procs[pid]
	if pi == nil {
		pi = &procInfo{}
		r.procs[pid] = pi
	}
	// An exited process not yet reaped (a zombie) reads as no mappings at
	// all: keep what was read while it ran, or the call sites of records
	// that arrive after its exit (the agent's launch events of a short
	// program) could no longer be placed.
	if err != nil || len(ms) == 0 {
		pi.gone = true
		return
	}
	pi.maps, pi.readAt, pi.gone = ms, time.Now(), false
	if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err == nil {
		exe = strings.TrimSuffix(exe, " (deleted)")
		r.exes[pid] = [2]string{procmaps.HostPath(int(pid), exe), exe}
	}
}

// Refresh re-reads the mappings of a process the resolver already knows
// (one that has sent events), so that libraries it loads are known before
// it exits. A started command is not read before its first event: until its
// exec, its mappings are those of the shell that waits to exec it.
func (r *Resolver) Refresh(pid uint32) {
	r.mu.Lock()
	pi := r.procs[pid]
	r.mu.Unlock()
	if pi != nil && !pi.gone {
		r.Prime(pid)
	}
}

// frameE is frame with fallbacks for processes already gone: addresses in
// the object that holds the probed function are named through its load bias
// (static cudart: the executable, with the kernel stubs and call sites), and
// addresses in the executable through the load address of its code that
// the event carries (shared cudart: the probes are in libcudart, the stubs
// and call sites in the executable).
func (r *Resolver) frameE(e *Event, addr uint64) symbolize.Frame {
	fr := r.frame(e.PID, addr)
	if fr.Module != "" {
		return fr
	}
	if r.objects != nil && e.IP != 0 && e.API != nil {
		if o, mod := r.objects(e.Obj); o != nil {
			if fv, ok := o.Symbol(e.API.Name); ok {
				if fb, ok := o.ResolveWithBias(mod, e.IP-fv, addr); ok {
					return fb
				}
			}
		}
	}
	if e.ExeStart != 0 {
		r.mu.Lock()
		exe := r.exes[e.PID]
		r.mu.Unlock()
		if o := r.sym.Object(exe[0]); exe[0] != "" && o != nil {
			if bias, ok := o.BiasFromCodeStart(e.ExeStart); ok {
				if fb, ok := o.ResolveWithBias(exe[1], bias, addr); ok {
					return fb
				}
			}
		}
	}
	return fr
}

func (r *Resolver) frame(pid uint32, addr uint64) symbolize.Frame {
	r.mu.Lock()
	pi := r.procs[pid]
	r.mu.Unlock()
	if pi == nil {
		r.Prime(pid)
	} else if m := pi.maps.Find(addr); (m == nil || !m.File()) && !pi.gone {
		// Not in the mappings known: the process exec'd or loaded a library
		// since they were read. Results are cached per address, so this
		// re-read happens once per unknown address.
		r.Prime(pid)
	}
	r.mu.Lock()
	pi = r.procs[pid]
	ms := pi.maps
	r.mu.Unlock()
	return r.sym.Resolve(int(pid), ms, addr)
}

// KernelName names the function a launch started. Runtime launches pass the
// host stub, which carries the kernel's mangled name, or (CUDA 12.x/13
// stubs) a kernel handle; driver launches pass a CUfunction or CUkernel.
// Handles are named by the lookups that returned them (AddLookup).
func (r *Resolver) KernelName(e *Event) *Kernel {
	key := pidAddr{e.PID, e.Func}
	if e.API.Driver {
		key.addr |= 1 << 63 // handles and stub addresses must not share cache slots
	}
	if k, ok := r.names[key]; ok {
		return k
	}
	k := &Kernel{}
	named := func(mangled string) {
		k.Mangled = mangled
		k.Demangled = symbolize.Demangle(mangled)
		k.Short = symbolize.DemangledBase(mangled)
	}
	switch {
	case e.API.Kind == KindGraph:
		k.Short = "graph:0x" + hex(e.Func)
		k.Demangled = k.Short
	case e.API.Driver:
		if n, ok := r.handleName(e.PID, e.Func); ok {
			named(n)
			break
		}
		k.Short = "CUfunction:0x" + hex(e.Func)
		k.Demangled = k.Short
	default:
		// Runtime launches pass the host stub (older nvcc) or, from
		// CUDA 12.x/13 stubs, the kernel handle (a CUkernel).
		fr := r.frameE(e, e.Func)
		if fr.Name != "" && fr.Offset == 0 {
			named(fr.Name)
		} else if n, ok := r.handleName(e.PID, e.Func); ok && fr.Module == "" {
			named(n)
		} else if n, ok := r.stubHandleName(e.PID, e.Func); ok && fr.Module == "" {
			named(n)
		} else {
			k.Short = fr.String()
			k.Demangled = k.Short
		}
	}
	r.names[key] = k
	return k
}

// Site names a call site (a return address) of event e's process as
// "func+0xoff (module)".
func (r *Resolver) Site(e *Event, addr uint64) string {
	key := pidAddr{e.PID, addr}
	if s, ok := r.sites[key]; ok {
		return s
	}
	fr := r.frameE(e, addr)
	s := fr.String()
	if fr.Name != "" && fr.Module != "" {
		s += " (" + symbolize.Short(fr.Module) + ")"
	}
	r.sites[key] = s
	return s
}

// SiteOf names an address of process pid (a lookup's call site).
func (r *Resolver) SiteOf(pid uint32, addr uint64) string {
	return r.Site(&Event{PID: pid}, addr)
}

// matchKernel reports whether a kernel name matches any -k pattern
// (mangled, demangled with or without parameters, or a glob of those).
func matchKernel(k *Kernel, pats []string) bool {
	if len(pats) == 0 {
		return true
	}
	for _, p := range pats {
		for _, n := range []string{k.Mangled, k.Demangled, k.Short} {
			if n == "" {
				continue
			}
			if n == p {
				return true
			}
			if ok, _ := path.Match(p, n); ok {
				return true
			}
		}
		// A bare name matches a kernel in a namespace: "gemm" ~ "ns::gemm<float>".
		if !strings.ContainsAny(p, "*?[") && k.Short != "" {
			base := k.Short
			if i := strings.IndexByte(base, '<'); i >= 0 {
				base = base[:i]
			}
			if j := strings.LastIndex(base, "::"); j >= 0 {
				base = base[j+2:]
			}
			if base == p {
				return true
			}
		}
	}
	return false
}

// Stack names a user stack's frames, stopping at the first address that is
// in no file mapping: without frame pointers the kernel's unwinder walks into
// data, and what follows is noise.
func (r *Resolver) Stack(e *Event, pcs []uint64) []string {
	out := make([]string, 0, len(pcs))
	for _, pc := range pcs {
		s := r.Site(e, pc)
		if strings.HasPrefix(s, "0x") {
			break
		}
		out = append(out, s)
	}
	return out
}

// CallSite names where an allocation was made. When the direct caller is
// one of cuda_runtime.h's inline wrappers (cudaMalloc<float>, emitted as a
// function in unoptimised code) every allocation would share its name, so
// the wrapper's own caller is used, if it resolves.
func (r *Resolver) CallSite(e *Event) string {
	s := r.Site(e, e.Caller)
	if e.Caller2 != 0 && isWrapper(s, e.API.Name) {
		if s2 := r.Site(e, e.Caller2); !strings.HasPrefix(s2, "0x") {
			return s2
		}
	}
	return s
}

func isWrapper(site, api string) bool {
	// Demangled: "cudaError cudaMalloc<float>(float**, unsigned long)+0x1d (app)".
	i := strings.Index(site, api+"<")
	return i >= 0 && i < 16
}

// stubHandleName names a kernel handle from the statics in which nvcc's
// host stubs keep them, read from the live process once: for a tool
// attached (-p) after the program had looked its kernels up. Objects
// without a symbol table (stripped libraries) have none to offer.
func (r *Resolver) stubHandleName(pid uint32, h uint64) (string, bool) {
	r.mu.Lock()
	pi := r.procs[pid]
	if pi == nil || pi.gone || pi.stubsRead {
		r.mu.Unlock()
		return "", false
	}
	pi.stubsRead = true
	ms := pi.maps
	r.mu.Unlock()

	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		return "", false
	}
	defer mem.Close()
	seen := map[string]bool{}
	for i := range ms {
		m := &ms[i]
		if !m.File() || seen[m.Path] || !strings.Contains(m.Perms, "x") {
			continue
		}
		seen[m.Path] = true
		hp := procmaps.HostPath(int(pid), m.Path)
		o := r.sym.Object(hp)
		if o == nil {
			continue
		}
		// The load bias from this mapping; the statics are in .bss, which
		// has no file offset of its own.
		bias, ok := o.LoadBias(m.Start, m.Offset)
		if !ok {
			continue
		}
		var b [8]byte
		for _, st := range o.StubHandles() {
			if _, err := mem.ReadAt(b[:], int64(st.Vaddr+bias)); err != nil {
				continue
			}
			if v := binary.LittleEndian.Uint64(b[:]); v != 0 {
				r.handles[pidAddr{pid, v}] = st.Kernel
			}
		}
	}
	return r.handleName(pid, h)
}
