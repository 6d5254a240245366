// Package symbolize turns addresses in a running process into function
// names: it finds the mapped ELF object with procmaps, undoes the load bias
// (PIE executables and shared libraries are mapped at a random base), looks
// the address up in the object's symbol tables and demangles C++ names.
// Symbol tables are read once per object and shared by every process that
// maps it.
package symbolize

import (
	"debug/elf"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/gpubpf/gpubpf/pkg/procmaps"
	"github.com/ianlancetaylor/demangle"
)

// Frame is a symbolised address.
type Frame struct {
	Addr   uint64
	Module string // path of the mapped object, "" if the address is in no file mapping
	Name   string // symbol as found in the object (mangled), "" if unknown
	Offset uint64 // Addr - symbol start
	// ModOffset is the address as an ELF virtual address of Module (what
	// addr2line wants), valid when Module is set.
	ModOffset uint64
}

// Demangled returns the demangled symbol name with its parameters
// ("vecAdd(float const*, float*, int)"), or the raw name when it is not a
// C++ name.
func (f Frame) Demangled() string { return Demangle(f.Name) }

// String renders "name+0x1c", "module+0x1234" or "0xADDR".
func (f Frame) String() string {
	switch {
	case f.Name != "":
		if f.Offset == 0 {
			return f.Demangled()
		}
		return f.Demangled() + "+0x" + strconv.FormatUint(f.Offset, 16)
	case f.Module != "":
		return filepath.Base(f.Module) + "+0x" + strconv.FormatUint(f.ModOffset, 16)
	default:
		return "0x" + strconv.FormatUint(f.Addr, 16)
	}
}

// Demangle demangles a C++ (Itanium) or Rust symbol; other names are returned
// unchanged.
func Demangle(name string) string {
	if name == "" {
		return name
	}
	if d, err := demangle.ToString(name); err == nil {
		return d
	}
	return name
}

// DemangledBase returns the demangled name without parameters or template
// arguments' parameter list, e.g. "vecAdd" for _Z6vecAddPKfPfi, for compact
// display and matching.
func DemangledBase(name string) string {
	if d, err := demangle.ToString(name, demangle.NoParams); err == nil {
		return d
	}
	return name
}

type symbol struct {
	start, size uint64
	name        string
}

// Object is one ELF file's function symbols and load segments.
type Object struct {
	syms  []symbol // sorted by start
	progs []elf.ProgHeader
	stubs []StubHandle // nvcc's host-stub kernel-handle statics (.symtab)

	byNameOnce sync.Once
	byName     map[string]uint64
}

// Open reads an ELF object's function symbols (static and dynamic tables).
func Open(path string) (*Object, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading ELF file %s: %w", path, err)
	}
	defer f.Close()
	o := &Object{}
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			o.progs = append(o.progs, p.ProgHeader)
		}
	}
	seen := map[uint64]bool{}
	for _, get := range []func() ([]elf.Symbol, error){f.Symbols, f.DynamicSymbols} {
		syms, err := get()
		if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
			return nil, fmt.Errorf("reading ELF symbols of %s: %w", path, err)
		}
		for _, s := range syms {
			t := elf.ST_TYPE(s.Info)
			if t == elf.STT_OBJECT {
				if st, ok := stubHandle(s); ok {
					o.stubs = append(o.stubs, st)
				}
				continue
			}
			if (t != elf.STT_FUNC && t != elf.STT_GNU_IFUNC) || s.Section == elf.SHN_UNDEF || s.Value == 0 {
				continue
			}
			if seen[s.Value] {
				continue // aliases: keep the first (the static table's name)
			}
			seen[s.Value] = true
			o.syms = append(o.syms, symbol{start: s.Value, size: s.Size, name: s.Name})
		}
	}
	sort.Slice(o.syms, func(i, j int) bool { return o.syms[i].start < o.syms[j].start })
	return o, nil
}

// FileOffsetToVaddr converts a file offset to the ELF virtual address its
// PT_LOAD segment puts it at.
func (o *Object) FileOffsetToVaddr(off uint64) (uint64, bool) {
	for _, p := range o.progs {
		if off >= p.Off && off < p.Off+p.Filesz {
			return off - p.Off + p.Vaddr, true
		}
	}
	return 0, false
}

// Lookup returns the function containing the virtual address v.
func (o *Object) Lookup(v uint64) (name string, off uint64, ok bool) {
	i := sort.Search(len(o.syms), func(i int) bool { return o.syms[i].start > v }) - 1
	if i < 0 {
		return "", 0, false
	}
	s := o.syms[i]
	// A symbol with no size (hand-written assembly) covers up to the next.
	if s.size != 0 && v >= s.start+s.size {
		return "", 0, false
	}
	return s.name, v - s.start, true
}

// Symbolizer resolves addresses of processes, caching ELF objects.
type Symbolizer struct {
	mu   sync.Mutex
	objs map[string]*Object // by host path; nil value: unreadable
}

// New returns an empty Symbolizer.
func New() *Symbolizer { return &Symbolizer{objs: map[string]*Object{}} }

// Object returns the (cached) object at a path this process can open.
func (s *Symbolizer) Object(hostPath string) *Object {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.objs[hostPath]
	if !ok {
		o, _ = Open(hostPath)
		s.objs[hostPath] = o
	}
	return o
}

// Resolve symbolises addr in a process whose mappings are ms.
func (s *Symbolizer) Resolve(pid int, ms procmaps.Maps, addr uint64) Frame {
	fr := Frame{Addr: addr}
	m := ms.Find(addr)
	if m == nil || !m.File() {
		return fr
	}
	fr.Module = m.Path
	off := addr - m.Start + m.Offset
	fr.ModOffset = off
	o := s.Object(procmaps.HostPath(pid, m.Path))
	if o == nil {
		return fr
	}
	v, ok := o.FileOffsetToVaddr(off)
	if !ok {
		return fr
	}
	fr.ModOffset = v
	if name, symOff, ok := o.Lookup(v); ok {
		fr.Name, fr.Offset = name, symOff
	}
	return fr
}

// Short returns the base name of a module path, for compact output.
func Short(module string) string {
	return strings.TrimSuffix(filepath.Base(module), " (deleted)")
}

// Symbol returns the virtual address of a function symbol by name.
func (o *Object) Symbol(name string) (uint64, bool) {
	o.byNameOnce.Do(func() {
		o.byName = make(map[string]uint64, len(o.syms))
		for _, s := range o.syms {
			o.byName[s.name] = s.start
		}
	})
	v, ok := o.byName[name]
	return v, ok
}

// ContainsVaddr reports whether a virtual address lies in one of the
// object's loaded segments.
func (o *Object) ContainsVaddr(v uint64) bool {
	for _, p := range o.progs {
		if v >= p.Vaddr && v < p.Vaddr+p.Memsz {
			return true
		}
	}
	return false
}

// BiasFromCodeStart returns the load bias of an executable whose code the
// kernel placed at startCode (mm->start_code, /proc/PID/stat's startcode):
// the address of its lowest executable PT_LOAD segment.
func (o *Object) BiasFromCodeStart(startCode uint64) (uint64, bool) {
	lowest, ok := uint64(0), false
	for _, p := range o.progs {
		if p.Flags&elf.PF_X != 0 && (!ok || p.Vaddr < lowest) {
			lowest, ok = p.Vaddr, true
		}
	}
	if !ok || startCode < lowest {
		return 0, false
	}
	return startCode - lowest, true
}

// ResolveWithBias symbolises addr in an object whose load bias (runtime
// address minus ELF virtual address) is known, e.g. from a probed function's
// runtime address; it needs no /proc/PID/maps.
func (o *Object) ResolveWithBias(module string, bias, addr uint64) (Frame, bool) {
	v := addr - bias
	if !o.ContainsVaddr(v) {
		return Frame{Addr: addr}, false
	}
	fr := Frame{Addr: addr, Module: module, ModOffset: v}
	if name, off, ok := o.Lookup(v); ok {
		fr.Name, fr.Offset = name, off
	}
	return fr, true
}
