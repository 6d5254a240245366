package main

import (
	"bufio"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/gpubpf/gpubpf/pkg/links"
	"github.com/gpubpf/gpubpf/pkg/procmaps"
	"github.com/gpubpf/gpubpf/pkg/symbolize"
)

var (
	isCudart = procmaps.LibraryMatcher("libcudart.so")
	isCuda   = procmaps.LibraryMatcher("libcuda.so")
)

// isCUDALib reports whether a path is a CUDA runtime or driver library.
func isCUDALib(p string) bool { return isCudart(p) || isCuda(p) }

// Attacher puts the entry and return probes on every traced API an object
// defines, once per file (uprobes live on the inode: attached once, they fire
// in every process that maps the file, now or later).
type Attacher struct {
	enter, exit *ebpf.Program
	kinds       uint32
	noDriver    bool // --no-driver: runtime APIs only
	launchEntry bool // --launch-entry: launches from the entry probe alone
	multi       bool // programs loaded for uprobe_multi links (kernel 6.6+)

	mu      sync.Mutex
	done    map[fileID]bool
	checked map[fileID]bool // executables looked at that define no CUDA API
	links   []link.Link
	objects []string // what was attached, for messages
	syms    []*symbolize.Object
	probes  int
}

// Object returns the symbols and path of the i-th probed object (the index
// events carry in their cookie).
func (a *Attacher) Object(i int) (*symbolize.Object, string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if i < 0 || i >= len(a.syms) {
		return nil, ""
	}
	return a.syms[i], a.objects[i]
}

type fileID struct{ dev, ino uint64 }

func statID(p string) (fileID, error) {
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		return fileID{}, err
	}
	return fileID{uint64(st.Dev), st.Ino}, nil
}

func NewAttacher(enter, exit *ebpf.Program, kinds uint32) *Attacher {
	return &Attacher{enter: enter, exit: exit, kinds: kinds, done: map[fileID]bool{}, checked: map[fileID]bool{}}
}

// Attach probes every traced API that the ELF object at hostPath defines. It
// returns how many functions were probed (0: none defined, or already done).
func (a *Attacher) Attach(hostPath, shown string) (int, error) {
	id, err := statID(hostPath)
	if err != nil {
		return 0, fmt.Errorf("cannot open %s: %w", shown, err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.done[id] || a.checked[id] {
		return 0, nil
	}
	defs, err := procmaps.DefinedFunctions(hostPath)
	if err != nil {
		a.checked[id] = true
		return 0, err
	}
	ex, err := link.OpenExecutable(hostPath)
	if err != nil {
		return 0, fmt.Errorf("cannot open %s for uprobes: %w", shown, err)
	}
	idx := uint64(len(a.objects))
	if idx > 254 {
		idx = 255 // unknown to the fallback symboliser; still traced
	}
	var entry, ret probeList
	for i := range apis {
		api := &apis[i]
		// Lookups name the launches; they are rare, so --no-driver keeps them.
		if a.kinds&(1<<api.Kind) == 0 || !defs[api.Name] || (api.Driver && a.noDriver && !api.Lookup) {
			continue
		}
		c := cookie(i) | idx<<24
		if a.launchEntry && api.Kind == KindLaunch && !api.Lookup {
			entry.add(api.Name, c|cEntryOnly)
			continue
		}
		entry.add(api.Name, c)
		ret.add(api.Name, c)
	}
	// Return probes first: a thread entering between the two attachments
	// then only produces a return without entry, which the BPF side
	// ignores, never an entry whose return is lost (that would hold the
	// thread's in-flight record and fold its later calls away).
	before := len(a.links)
	if err := a.attachList(ex, &ret, true, shown); err != nil {
		return 0, err
	}
	if err := a.attachList(ex, &entry, false, shown); err != nil {
		links.CloseAll(a.links[before:])
		a.links = a.links[:before]
		return 0, err
	}
	n := len(entry.syms)
	if n == 0 {
		a.checked[id] = true
		return 0, nil
	}
	a.done[id] = true
	a.probes += n
	a.objects = append(a.objects, shown)
	sym, _ := symbolize.Open(hostPath) // nil: names from /proc/PID/maps only
	a.syms = append(a.syms, sym)
	return n, nil
}

// probeList is the functions of one object to probe, with their cookies.
type probeList struct {
	syms    []string
	cookies []uint64
}

func (l *probeList) add(sym string, cookie uint64) {
	l.syms = append(l.syms, sym)
	l.cookies = append(l.cookies, cookie)
}

// attachList attaches one program to every function of l: as one
// uprobe_multi link where the kernel has them (detaching it waits for one
// RCU grace period instead of one per probe, which kept the tool alive for
// seconds after the traced program had ended), else one link per function.
// On error, what this call attached is detached again.
func (a *Attacher) attachList(ex *link.Executable, l *probeList, ret bool, shown string) error {
	if len(l.syms) == 0 {
		return nil
	}
	kind, prog := "uprobe", a.enter
	if ret {
		kind, prog = "uretprobe", a.exit
	}
	if a.multi {
		attach := ex.UprobeMulti
		if ret {
			attach = ex.UretprobeMulti
		}
		ml, err := attach(l.syms, prog, &link.UprobeMultiOptions{Cookies: l.cookies})
		if err != nil {
			return fmt.Errorf("attaching %ss to %d functions in %s: %w", kind, len(l.syms), shown, err)
		}
		a.links = append(a.links, ml)
		return nil
	}
	var done []link.Link
	for i, sym := range l.syms {
		attach := ex.Uprobe
		if ret {
			attach = ex.Uretprobe
		}
		pl, err := attach(sym, prog, &link.UprobeOptions{Cookie: l.cookies[i]})
		if err != nil {
			links.CloseAll(done)
			return fmt.Errorf("attaching a %s to %s in %s: %w", kind, sym, shown, err)
		}
		done = append(done, pl)
	}
	a.links = append(a.links, done...)
	return nil
}

// Objects lists what has been attached.
func (a *Attacher) Objects() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.objects...)
}

// Close detaches everything.
func (a *Attacher) Close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	links.CloseAll(a.links)
	a.links = nil
}

// AttachProcess attaches to the CUDA libraries pid maps now and to its
// executable when it defines CUDA APIs itself (static cudart). It returns
// the number of objects of the process that carry probes (new or earlier).
func (a *Attacher) AttachProcess(pid int, logf func(string, ...any)) (int, error) {
	ms, err := procmaps.Read(pid)
	if err != nil {
		return 0, err
	}
	found := 0
	cands := ms.Matching(isCUDALib)
	if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err == nil {
		cands = append([]string{strings.TrimSuffix(exe, " (deleted)")}, cands...)
	}
	for _, p := range cands {
		hp := procmaps.HostPath(pid, p)
		n, err := a.Attach(hp, p)
		if err != nil {
			if isCUDALib(p) {
				logf("%v", err)
			}
			continue
		}
		if n > 0 {
			logf("attached %d probes to %s (process %d)", 2*n, p, pid)
		}
		if id, err := statID(hp); err == nil {
			a.mu.Lock()
			if a.done[id] {
				found++
			}
			a.mu.Unlock()
		}
	}
	return found, nil
}

// systemLibraries lists CUDA runtime and driver libraries installed where
// the dynamic linker looks: its cache (ldconfig -p), LD_LIBRARY_PATH and the
// usual CUDA toolkit directories. Probing them before a program starts means
// its first call is seen.
func systemLibraries(extraDirs []string) []string {
	var out []string
	seen := map[string]bool{}
	add := func(p string) {
		if p == "" || seen[p] || !isCUDALib(p) {
			return
		}
		if st, err := os.Stat(p); err != nil || st.IsDir() {
			return
		}
		seen[p] = true
		out = append(out, p)
	}
	for _, ldconfig := range []string{"/sbin/ldconfig", "/usr/sbin/ldconfig", "ldconfig"} {
		outb, err := exec.Command(ldconfig, "-p").Output()
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(strings.NewReader(string(outb)))
		for sc.Scan() {
			if _, p, ok := strings.Cut(sc.Text(), "=> "); ok {
				add(strings.TrimSpace(p))
			}
		}
		break
	}
	dirs := append([]string(nil), extraDirs...)
	dirs = append(dirs, filepath.SplitList(os.Getenv("LD_LIBRARY_PATH"))...)
	globs, _ := filepath.Glob("/usr/local/cuda*/lib64")
	dirs = append(dirs, globs...)
	globs, _ = filepath.Glob("/usr/local/cuda*/targets/*/lib")
	dirs = append(dirs, globs...)
	dirs = append(dirs, "/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib/wsl/lib")
	for _, d := range dirs {
		if d == "" {
			continue
		}
		for _, pat := range []string{"libcudart.so*", "libcuda.so*"} {
			ms, _ := filepath.Glob(filepath.Join(d, pat))
			for _, m := range ms {
				add(m)
			}
		}
	}
	sort.Strings(out)
	return out
}

// runpathDirs returns an executable's DT_RUNPATH/DT_RPATH directories with
// $ORIGIN expanded, where a -cudart shared program may find libcudart.
func runpathDirs(exe string) []string {
	f, err := elf.Open(exe)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	for _, tag := range []elf.DynTag{elf.DT_RUNPATH, elf.DT_RPATH} {
		vals, _ := f.DynString(tag)
		for _, v := range vals {
			for _, d := range filepath.SplitList(v) {
				d = strings.ReplaceAll(d, "$ORIGIN", filepath.Dir(exe))
				d = strings.ReplaceAll(d, "${ORIGIN}", filepath.Dir(exe))
				out = append(out, d)
			}
		}
	}
	return out
}

var errNoCUDA = errors.New("no CUDA library found")
