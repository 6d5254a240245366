// Package procmaps reads /proc/PID/maps: which files a process maps and
// where, which mapped object provides a symbol (a CUDA library, or the
// executable itself when a library was linked statically), and which
// processes map a given library. It knows nothing about any one tool.
package procmaps

import (
	"bufio"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Mapping is one line of /proc/PID/maps.
type Mapping struct {
	Start, End uint64
	Perms      string // "r-xp"
	Offset     uint64 // file offset of Start
	Dev        string // "fd:01"
	Inode      uint64
	Path       string // file path, "[heap]", "" for anonymous memory
}

// Exec reports whether the mapping is executable.
func (m *Mapping) Exec() bool { return len(m.Perms) >= 3 && m.Perms[2] == 'x' }

// File reports whether the mapping is backed by a regular file.
func (m *Mapping) File() bool { return m.Inode != 0 && strings.HasPrefix(m.Path, "/") }

// Maps is a process's mappings in address order.
type Maps []Mapping

// ErrNoProcess is returned when the process does not exist (any more).
var ErrNoProcess = errors.New("no such process")

// Read parses /proc/PID/maps.
func Read(pid int) (Maps, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("process %d: %w", pid, ErrNoProcess)
		}
		if errors.Is(err, os.ErrPermission) {
			return nil, fmt.Errorf("reading the mappings of process %d: %w (run as root in the process's PID and user namespace)", pid, err)
		}
		return nil, fmt.Errorf("reading the mappings of process %d: %w", pid, err)
	}
	defer f.Close()
	m, err := Parse(f)
	if err != nil {
		return nil, fmt.Errorf("reading the mappings of process %d: %w", pid, err)
	}
	return m, nil
}

// Parse parses the maps format.
func Parse(r io.Reader) (Maps, error) {
	var out Maps
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		m, err := parseLine(string(line))
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Start < out[j].Start })
	return out, nil
}

func parseLine(line string) (Mapping, error) {
	var m Mapping
	// address perms offset dev inode [path]; the path may contain spaces.
	fields := make([]string, 0, 6)
	rest := line
	for i := 0; i < 5; i++ {
		rest = strings.TrimLeft(rest, " ")
		j := strings.IndexByte(rest, ' ')
		if j < 0 {
			fields = append(fields, rest)
			rest = ""
			continue
		}
		fields = append(fields, rest[:j])
		rest = rest[j:]
	}
	if len(fields) < 5 || fields[4] == "" {
		return m, fmt.Errorf("malformed maps line %q", line)
	}
	lo, hi, ok := strings.Cut(fields[0], "-")
	if !ok {
		return m, fmt.Errorf("malformed address range in maps line %q", line)
	}
	var err error
	if m.Start, err = strconv.ParseUint(lo, 16, 64); err != nil {
		return m, fmt.Errorf("malformed maps line %q: %w", line, err)
	}
	if m.End, err = strconv.ParseUint(hi, 16, 64); err != nil {
		return m, fmt.Errorf("malformed maps line %q: %w", line, err)
	}
	m.Perms = fields[1]
	if m.Offset, err = strconv.ParseUint(fields[2], 16, 64); err != nil {
		return m, fmt.Errorf("malformed maps line %q: %w", line, err)
	}
	m.Dev = fields[3]
	if m.Inode, err = strconv.ParseUint(fields[4], 10, 64); err != nil {
		return m, fmt.Errorf("malformed maps line %q: %w", line, err)
	}
	m.Path = strings.TrimSuffix(strings.TrimLeft(rest, " "), " (deleted)")
	return m, nil
}

// Find returns the mapping containing addr, or nil.
func (ms Maps) Find(addr uint64) *Mapping {
	i := sort.Search(len(ms), func(i int) bool { return ms[i].End > addr })
	if i < len(ms) && ms[i].Start <= addr {
		return &ms[i]
	}
	return nil
}

// Objects returns the distinct file-backed objects mapped, in address order.
func (ms Maps) Objects() []string {
	seen := map[string]bool{}
	var out []string
	for _, m := range ms {
		if m.File() && !seen[m.Path] {
			seen[m.Path] = true
			out = append(out, m.Path)
		}
	}
	return out
}

// LibraryMatcher reports whether a path names a library with the given base
// name, ignoring version suffixes: LibraryMatcher("libcudart.so") matches
// /usr/lib/libcudart.so.12.4.127 but not libcudart_static.a.
func LibraryMatcher(soname string) func(path string) bool {
	return func(path string) bool {
		base := filepath.Base(path)
		return base == soname || strings.HasPrefix(base, soname+".")
	}
}

// Matching returns the mapped objects for which match is true.
func (ms Maps) Matching(match func(path string) bool) []string {
	var out []string
	for _, p := range ms.Objects() {
		if match(p) {
			out = append(out, p)
		}
	}
	return out
}

// HostPath returns a path through which this process can open a file the
// process pid maps, also when pid lives in another mount namespace
// (a container): /proc/PID/root/PATH.
func HostPath(pid int, path string) string {
	if pid > 0 {
		p := fmt.Sprintf("/proc/%d/root%s", pid, path)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return path
}

// Environ is pid's environment as it started (nil when unreadable).
func Environ(pid int) map[string]string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		return nil
	}
	env := map[string]string{}
	for _, kv := range bytes.Split(b, []byte{0}) {
		if k, v, ok := strings.Cut(string(kv), "="); ok {
			env[k] = v
		}
	}
	return env
}

// SameNamespace reports whether pid shares this process's namespace of
// kind ("mnt", "net", "pid"); an unreadable one counts as the same.
func SameNamespace(pid int, kind string) bool {
	var a, b unix.Stat_t
	if unix.Stat("/proc/self/ns/"+kind, &a) != nil || unix.Stat(fmt.Sprintf("/proc/%d/ns/%s", pid, kind), &b) != nil {
		return true
	}
	return a.Ino == b.Ino && a.Dev == b.Dev
}

// DefinedFunctions returns the names of the functions an ELF file defines
// (static and dynamic symbol tables), leaving out imports.
func DefinedFunctions(path string) (map[string]bool, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading ELF symbols of %s: %w", path, err)
	}
	defer f.Close()
	out := map[string]bool{}
	for _, get := range []func() ([]elf.Symbol, error){f.Symbols, f.DynamicSymbols} {
		syms, err := get()
		if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
			return nil, fmt.Errorf("reading ELF symbols of %s: %w", path, err)
		}
		for _, s := range syms {
			if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Section != elf.SHN_UNDEF && s.Value != 0 {
				out[s.Name] = true
			}
		}
	}
	return out, nil
}

// Provider finds the mapped object of pid that defines symbol: the first
// file-backed object (the executable first, then libraries in address order
// as the dynamic linker would search) whose symbol tables define it. It
// returns the path as the process sees it.
func Provider(pid int, ms Maps, symbol string) (string, error) {
	exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	exe = strings.TrimSuffix(exe, " (deleted)")
	objs := ms.Objects()
	sort.SliceStable(objs, func(i, j int) bool { return objs[i] == exe && objs[j] != exe })
	for _, o := range objs {
		defs, err := DefinedFunctions(HostPath(pid, o))
		if err != nil {
			continue // not ELF (a font, a locale archive): cannot provide code
		}
		if defs[symbol] {
			return o, nil
		}
	}
	return "", fmt.Errorf("no object mapped by process %d defines %s", pid, symbol)
}

// PIDs lists the processes on the system.
func PIDs() ([]int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("listing processes: %w", err)
	}
	var out []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil && pid > 0 {
			out = append(out, pid)
		}
	}
	return out, nil
}

// ProcessesMapping lists the processes that map an object for which match is
// true, with the matching paths. Processes that vanish or cannot be read are
// skipped.
func ProcessesMapping(match func(path string) bool) (map[int][]string, error) {
	pids, err := PIDs()
	if err != nil {
		return nil, err
	}
	out := map[int][]string{}
	for _, pid := range pids {
		ms, err := Read(pid)
		if err != nil {
			continue
		}
		if libs := ms.Matching(match); len(libs) > 0 {
			out[pid] = libs
		}
	}
	return out, nil
}
