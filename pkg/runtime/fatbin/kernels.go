package fatbin

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/ianlancetaylor/demangle"
)

// stoCUDAEntry marks kernel (.entry) symbols in a cubin's symbol table.
const stoCUDAEntry = 0x10

// Kernel is one kernel of a binary with where its code is available.
type Kernel struct {
	Name      string // mangled
	Demangled string // without parameters, e.g. "ns::reduce"; Name if not mangled
	Signature string // full demangled signature, e.g. "ns::reduce(float const*, float*, int)"
	HasPTX    bool
	PTXArchs  []string // compute_XX of the PTX that defines it
	SASSArchs []string // sm_XX of the cubins that define it
}

// Traceable reports whether the kernel can be instrumented (it has PTX).
func (k *Kernel) Traceable() bool { return k.HasPTX }

// Advice says what to do to trace a kernel without PTX; "" if it has PTX.
func (k *Kernel) Advice() string {
	if k.HasPTX {
		return ""
	}
	arch := "compute_XX"
	if len(k.SASSArchs) > 0 {
		arch = "compute_" + strings.TrimPrefix(k.SASSArchs[len(k.SASSArchs)-1], "sm_")
	}
	return fmt.Sprintf("kernel %s has only %s SASS, no PTX: rebuild with -gencode arch=%s,code=%s to trace it",
		k.Demangled, strings.Join(k.SASSArchs, ","), arch, arch)
}

// Demangle returns the name without parameters and the full signature.
func Demangle(name string) (base, sig string) {
	sig = demangle.Filter(name)
	if b, err := demangle.ToString(name, demangle.NoParams, demangle.NoTemplateParams); err == nil {
		base = b
	} else {
		base = sig
	}
	return base, sig
}

// Kernels lists every kernel of the fatbins, sorted by demangled name.
// Elements that cannot be read are skipped; use Inventory to see why.
func Kernels(fbs ...*Fatbin) []Kernel {
	ks, _ := Inventory(fbs...)
	return ks
}

// Inventory is Kernels that also reports unreadable elements (the list is
// still filled from the readable ones).
func Inventory(fbs ...*Fatbin) ([]Kernel, error) {
	byName := map[string]*Kernel{}
	var errs []error
	get := func(n string) *Kernel {
		k := byName[n]
		if k == nil {
			base, sig := Demangle(n)
			k = &Kernel{Name: n, Demangled: base, Signature: sig}
			byName[n] = k
		}
		return k
	}
	for _, fb := range fbs {
		for _, e := range fb.Elements {
			if e.Kind != KindPTX && e.Kind != KindELF {
				continue
			}
			names, arch, err := elementKernels(fb, e)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			for _, n := range names {
				k := get(n)
				if e.Kind == KindPTX {
					k.HasPTX = true
					k.PTXArchs = addUniq(k.PTXArchs, arch)
				} else {
					k.SASSArchs = addUniq(k.SASSArchs, arch)
				}
			}
		}
	}
	out := make([]Kernel, 0, len(byName))
	for _, k := range byName {
		sortArchs(k.PTXArchs)
		sortArchs(k.SASSArchs)
		out = append(out, *k)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Demangled != out[j].Demangled {
			return out[i].Demangled < out[j].Demangled
		}
		return out[i].Name < out[j].Name
	})
	return out, errors.Join(errs...)
}

// KernelNames lists the kernels fb's elements define (PTX entries and
// cubin entry symbols), each once, unsorted: Inventory without the
// demangling and the per-architecture lists, for an index of many
// containers (-p on PyTorch). An unreadable element is skipped and said.
func KernelNames(fb *Fatbin) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	var errs []error
	for _, e := range fb.Elements {
		if e.Kind != KindPTX && e.Kind != KindELF {
			continue
		}
		names, _, err := elementKernels(fb, e)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, n := range names {
			if !seen[n] {
				seen[n] = true
				out = append(out, n)
			}
		}
	}
	return out, errors.Join(errs...)
}

// elementKernels is the kernels a PTX or cubin element of fb defines and
// its architecture (a cubin's from its ELF header where the element does
// not say).
func elementKernels(fb *Fatbin, e *Element) (names []string, arch string, err error) {
	p, err := e.Payload()
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", fb.Source, err)
	}
	arch = e.Arch()
	if e.Kind == KindPTX {
		return PTXEntries(p), arch, nil
	}
	names, sm, err := CubinKernels(p)
	if err != nil {
		return nil, "", fmt.Errorf("%s: cubin at offset %#x: %w", fb.Source, e.Offset, err)
	}
	if e.SM == 0 && sm != 0 {
		arch = "sm_" + strconv.Itoa(sm)
	}
	return names, arch, nil
}

func addUniq(s []string, v string) []string {
	for _, x := range s {
		if x == v {
			return s
		}
	}
	return append(s, v)
}

func archNum(a string) int {
	i := strings.LastIndexByte(a, '_')
	n, _ := strconv.Atoi(strings.TrimRight(a[i+1:], "af"))
	return n
}

func sortArchs(s []string) {
	sort.Slice(s, func(i, j int) bool { return archNum(s[i]) < archNum(s[j]) })
}

// PTXEntries returns the names of the .entry functions of PTX text, in
// order. It is a light scan (no full parse) so listing kernels of a large
// binary stays cheap.
func PTXEntries(ptx []byte) []string {
	var out []string
	rest := ptx
	for {
		i := bytes.Index(rest, []byte(".entry"))
		if i < 0 {
			return out
		}
		// Must be a directive: preceded by start, space or newline, followed by space.
		okBefore := i == 0 || isSpace(rest[i-1])
		rest = rest[i+len(".entry"):]
		if !okBefore || len(rest) == 0 || !isSpace(rest[0]) {
			continue
		}
		// Skip whitespace, then the identifier.
		j := 0
		for j < len(rest) && isSpace(rest[j]) {
			j++
		}
		k := j
		for k < len(rest) && isIdent(rest[k]) {
			k++
		}
		if k > j {
			out = append(out, string(rest[j:k]))
		}
		rest = rest[k:]
	}
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func isIdent(c byte) bool {
	return c == '_' || c == '$' || c == '%' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// CubinKernels lists the kernels (entry symbols) of a cubin and the SM
// version recorded in its ELF header flags (0 if unrecognised).
func CubinKernels(cubin []byte) (names []string, sm int, err error) {
	var r io.ReaderAt = bytes.NewReader(cubin)
	if len(cubin) >= 24 && bytes.HasPrefix(cubin, []byte(elf.ELFMAG)) {
		// nvcc stores the toolkit version (e.g. 0x76 = 118) in e_version,
		// which debug/elf rejects unless it is EV_CURRENT: read through
		// a patch (a copy of each cubin cost a -p index of a library
		// as much as its decompression)
		r = evCurrent{cubin}
	}
	f, err := elf.NewFile(r)
	if err != nil {
		return nil, 0, fmt.Errorf("not an ELF cubin: %w", err)
	}
	defer f.Close()
	sm = cubinSM(cubin, f.ABIVersion)
	syms, err := f.Symbols()
	if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
		return nil, sm, fmt.Errorf("symbol table: %w", err)
	}
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Other&stoCUDAEntry != 0 {
			names = append(names, s.Name)
		}
	}
	if len(names) == 0 {
		// Some toolkits do not set STO_CUDA_ENTRY; every kernel has its own
		// .nv.info.NAME section carrying the kernel attributes.
		for _, s := range f.Sections {
			if n, ok := strings.CutPrefix(s.Name, ".nv.info."); ok && n != "" {
				names = append(names, n)
			}
		}
	}
	return names, sm, nil
}

// evCurrent reads a cubin with e_version (bytes 20-23) as EV_CURRENT.
type evCurrent struct{ b []byte }

func (e evCurrent) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off >= int64(len(e.b)) {
		return 0, io.EOF
	}
	n := copy(p, e.b[off:])
	var v [4]byte
	binary.LittleEndian.PutUint32(v[:], uint32(elf.EV_CURRENT))
	for i := range 4 {
		if at := 20 + int64(i) - off; at >= 0 && at < int64(n) {
			p[at] = v[i]
		}
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// cubinSM decodes the target SM from e_flags (offset 48 of an ELF64
// header; debug/elf does not expose it). Up to CUDA 12 (ELF ABI version 7)
// the SM is in bits 0-7 (repeated in bits 16-23); newer ABI versions moved
// it to bits 8-15.
func cubinSM(cubin []byte, abi uint8) int {
	if len(cubin) < 52 || cubin[4] != byte(elf.ELFCLASS64) {
		return 0
	}
	flags := binary.LittleEndian.Uint32(cubin[48:])
	if abi >= 8 {
		return int(flags >> 8 & 0xff)
	}
	return int(flags & 0xff)
}

// PTXFor returns the PTX element that defines kernel (mangled name) with
// the highest compute capability not above maxSM (0: no limit; the JIT
// cannot compile PTX for a newer architecture than the device's), and its
// text. The error says what to do when there is none.
func PTXFor(fbs []*Fatbin, kernel string, maxSM int) (*Element, []byte, error) {
	return NewIndex(fbs).PTXFor(kernel, maxSM)
}

// An Index is what PTXFor reads of a set of fatbins, read once: each
// element's decompressed PTX text and the kernels each element defines. A
// module of many kernels asks for every one of them (200 kernels read every
// element 200 times: most of a -p attach's 220 ms, H100 2026-11-24).
type Index struct {
	elems []indexed
}

type indexed struct {
	fb    *Fatbin
	e     *Element
	text  []byte // PTX elements
	err   error  // PTX elements whose payload could not be read
	names map[string]bool
}

// NewIndex reads fbs' elements: PTX elements are kept decompressed, cubins
// only by the kernels they define (an unreadable cubin defines none).
func NewIndex(fbs []*Fatbin) *Index {
	x := &Index{}
	for _, fb := range fbs {
		for _, e := range fb.Elements {
			it := indexed{fb: fb, e: e, names: map[string]bool{}}
			switch e.Kind {
			case KindELF:
				if p, err := e.Payload(); err == nil {
					if names, _, err := CubinKernels(p); err == nil {
						for _, n := range names {
							it.names[n] = true
						}
					}
				}
			case KindPTX:
				it.text, it.err = e.Payload()
				for _, n := range PTXEntries(it.text) {
					it.names[n] = true
				}
			default:
				continue
			}
			x.elems = append(x.elems, it)
		}
	}
	return x
}

// PTXFor is PTXFor of the index's fatbins: the text returned is the
// index's own (the same slice for every kernel of an element).
func (x *Index) PTXFor(kernel string, maxSM int) (*Element, []byte, error) {
	var best *Element
	var bestText []byte
	var sass []string
	for _, it := range x.elems {
		e := it.e
		switch {
		case e.Kind == KindELF:
			if it.names[kernel] {
				sass = addUniq(sass, e.Arch())
			}
		case e.Kind == KindPTX && (maxSM == 0 || e.SM <= maxSM) && (best == nil || e.SM > best.SM):
			if it.err != nil {
				return nil, nil, fmt.Errorf("%s: %w", it.fb.Source, it.err)
			}
			if it.names[kernel] {
				best, bestText = e, it.text
			}
		}
	}
	if best == nil {
		base, _ := Demangle(kernel)
		if len(sass) > 0 {
			k := Kernel{Name: kernel, Demangled: base, SASSArchs: sass}
			sortArchs(k.SASSArchs)
			return nil, nil, fmt.Errorf("%s", k.Advice())
		}
		return nil, nil, fmt.Errorf("kernel %s is not in these fatbins (no PTX or SASS defines it)", base)
	}
	return best, bestText, nil
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
