// Package inject loads a shared library into a running process that was
// started without it: it stops one thread of the process with ptrace, makes
// that thread call the C library's dlopen on the library, restores every
// register (general, floating point and vector) and lets it go on. The rest
// of the process keeps running throughout; the chosen thread is stopped for
// as long as dlopen and the library's constructors take.
//
// Which thread: one blocked in a system call that holds no C-library lock
// (a futex, poll, sleep or read wait), else one running outside the C
// library and the dynamic loader. A thread interrupted inside libc could be
// holding malloc's or the loader's lock, and dlopen would then wait for
// itself forever; such threads are let go at once and another is tried.
//
// It is x86-64 only for now (the register juggling is per architecture), and
// refuses, with the reason, where it cannot work: Yama's ptrace_scope 3, a
// process in another mount namespace (a container: the library path would
// not resolve there), a seccomp-filtered process, a statically linked
// executable (no dlopen), or a process another tracer holds.
package inject

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gpubpf/gpubpf/pkg/procmaps"
	"github.com/gpubpf/gpubpf/pkg/symbolize"
)

// Result says what an injection did.
type Result struct {
	// AlreadyLoaded: the process already mapped the library (nothing done).
	AlreadyLoaded bool
	// Thread is the thread that made the dlopen call.
	Thread int
	// Stopped is how long that thread was held (ptrace stop to detach),
	// Call the part of it spent in dlopen.
	Stopped, Call time.Duration
	// Tries is how many threads were stopped and let go before one was
	// found in a safe place.
	Tries int
}

// Options bound an injection.
type Options struct {
	// Timeout bounds the whole injection (0: 5 s). Past it while dlopen
	// runs, the thread is left to finish the call on its own.
	Timeout time.Duration
}

// ErrUnsupported wraps the refusals: the process cannot be injected here.
var ErrUnsupported = errors.New("cannot inject into this process")

// Inject makes process pid dlopen the shared library at lib (an absolute
// path, the same in the process's mount namespace).
func Inject(pid int, lib string, opts Options) (*Result, error) {
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Second
	}
	if !filepath.IsAbs(lib) {
		return nil, fmt.Errorf("library path %q: want an absolute path", lib)
	}
	ms, err := procmaps.Read(pid)
	if err != nil {
		return nil, err
	}
	if mapsLibrary(ms, lib) {
		return &Result{AlreadyLoaded: true}, nil
	}
	if err := checkProcess(pid, lib); err != nil {
		return nil, err
	}
	fns, err := findFunctions(pid, ms)
	if err != nil {
		return nil, err
	}
	return inject(pid, lib, fns, ms, opts)
}

// mapsLibrary reports whether the process maps lib (by path, or the same
// file by device and inode).
func mapsLibrary(ms procmaps.Maps, lib string) bool {
	var st os.FileInfo
	if fi, err := os.Stat(lib); err == nil {
		st = fi
	}
	for _, m := range ms {
		if m.Path == lib {
			return true
		}
		if st != nil && m.File() && filepath.Base(m.Path) == filepath.Base(lib) {
			if fi, err := os.Stat(m.Path); err == nil && os.SameFile(fi, st) {
				return true
			}
		}
	}
	return false
}

// checkProcess refuses what ptrace or dlopen cannot do here, saying why.
func checkProcess(pid int, lib string) error {
	if b, err := os.ReadFile("/proc/sys/kernel/yama/ptrace_scope"); err == nil {
		if err := yamaAllows(string(b)); err != nil {
			return err
		}
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return fmt.Errorf("process %d: %w", pid, err)
	}
	if err := statusAllows(pid, string(status)); err != nil {
		return err
	}
	if st, err := os.Stat(fmt.Sprintf("/proc/%d/root%s", pid, lib)); !procmaps.SameNamespace(pid, "mnt") && (err != nil || !st.Mode().IsRegular()) {
		return fmt.Errorf("%w: process %d runs in another mount namespace (a container), where %s does not resolve; start it with LD_PRELOAD set to the agent instead", ErrUnsupported, pid, lib)
	}
	return nil
}

// yamaAllows reads /proc/sys/kernel/yama/ptrace_scope.
func yamaAllows(scope string) error {
	if strings.TrimSpace(scope) == "3" {
		return fmt.Errorf("%w: ptrace is disabled on this machine (kernel.yama.ptrace_scope = 3, which only a reboot lifts); start the program with LD_PRELOAD set to the agent instead", ErrUnsupported)
	}
	return nil
}

// statusAllows reads /proc/PID/status: another tracer, a seccomp filter.
func statusAllows(pid int, status string) error {
	for _, line := range strings.Split(status, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		switch k {
		case "TracerPid":
			if v != "0" {
				return fmt.Errorf("%w: process %d is already traced by process %s (a debugger or another tool); detach it first", ErrUnsupported, pid, v)
			}
		case "Seccomp":
			if v == "1" || v == "2" {
				return fmt.Errorf("%w: process %d runs under seccomp (mode %s), which may kill it for the calls loading a library makes; start it with LD_PRELOAD set to the agent instead", ErrUnsupported, pid, v)
			}
		}
	}
	return nil
}

// functions are the runtime addresses injection calls, and where the C
// library and the dynamic loader lie (threads stopped inside them are not
// used).
type functions struct {
	dlopen, dlerror uint64
	unsafe          []span
}

type span struct{ start, end uint64 }

func (f *functions) inUnsafe(pc uint64) bool {
	for _, s := range f.unsafe {
		if pc >= s.start && pc < s.end {
			return true
		}
	}
	return false
}

// findFunctions finds dlopen (glibc 2.34+ has it in libc itself; before,
// libc's __libc_dlopen_mode, which takes the same arguments) and dlerror.
func findFunctions(pid int, ms procmaps.Maps) (*functions, error) {
	f := &functions{}
	var libc string
	for _, m := range ms {
		if !m.File() {
			continue
		}
		base := filepath.Base(m.Path)
		if isLibc(base) || strings.HasPrefix(base, "ld-linux") || strings.HasPrefix(base, "ld-") && strings.Contains(base, ".so") ||
			strings.HasPrefix(base, "libpthread") || strings.HasPrefix(base, "libdl.") {
			if m.Exec() {
				f.unsafe = append(f.unsafe, span{m.Start, m.End})
			}
			if isLibc(base) && libc == "" {
				libc = m.Path
			}
		}
	}
	if libc == "" {
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		return nil, fmt.Errorf("%w: process %d (%s) maps no C library: it is statically linked (a Go program, a static binary) and cannot load a library; CUDA programs always link libc dynamically", ErrUnsupported, pid, exe)
	}
	obj, err := symbolize.Open(procmaps.HostPath(pid, libc))
	if err != nil {
		return nil, err
	}
	bias, err := loadBias(ms, libc, obj)
	if err != nil {
		return nil, fmt.Errorf("process %d: %w", pid, err)
	}
	for _, name := range []string{"dlopen", "__libc_dlopen_mode"} {
		if v, ok := obj.Symbol(name); ok {
			f.dlopen = v + bias
			break
		}
	}
	if v, ok := obj.Symbol("dlerror"); ok {
		f.dlerror = v + bias
	}
	if f.dlopen == 0 {
		return nil, fmt.Errorf("%w: the C library of process %d (%s) exports neither dlopen nor __libc_dlopen_mode", ErrUnsupported, pid, libc)
	}
	return f, nil
}

func isLibc(base string) bool {
	return base == "libc.so.6" || strings.HasPrefix(base, "libc-") && strings.HasSuffix(base, ".so") || strings.HasPrefix(base, "libc.so")
}

// loadBias is where the object's ELF addresses lie in the process: the
// runtime address of a mapping minus the virtual address of its file offset.
func loadBias(ms procmaps.Maps, path string, obj *symbolize.Object) (uint64, error) {
	for _, m := range ms {
		if m.Path != path {
			continue
		}
		if v, ok := obj.FileOffsetToVaddr(m.Offset); ok {
			return m.Start - v, nil
		}
	}
	return 0, fmt.Errorf("cannot place %s's code in the process's address space", path)
}

// threads lists the process's threads, its main thread first.
func threads(pid int) ([]int, error) {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("process %d: %w", pid, procmaps.ErrNoProcess)
		}
		return nil, err
	}
	out := []int{pid}
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil && tid != pid {
			out = append(out, tid)
		}
	}
	return out, nil
}

// cString cuts a NUL-terminated string out of b.
func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}
