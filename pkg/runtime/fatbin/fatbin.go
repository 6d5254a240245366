// Package fatbin reads NVIDIA fat binaries: the wrapper that cudart
// registers (magic 0x466243b1), the container it points to (magic
// 0xBA55ED50) and the PTX and cubin elements inside, compressed with zstd
// (CUDA 13), the older LZ4-style block codec or not at all.
//
// The format is undocumented; the layout below was checked against binaries
// built by nvcc 11.8 and 13.0 (see testdata/). Every length read from the
// input is bounds-checked and every decompressed size is capped, so malformed
// or hostile input yields an error naming the offset, never a panic or an
// unbounded allocation.
package fatbin

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Magic numbers of the two structures.
const (
	WrapperMagic   = 0x466243b1
	ContainerMagic = 0xBA55ED50
)

// Sizes of the fixed headers.
const (
	WrapperSize         = 24
	containerHeaderSize = 16
	minElementHeader    = 64
)

// MaxPayload caps the size of one decompressed element (and of a container
// read from process memory). The largest real elements (cuBLAS, PyTorch)
// are a few tens of MiB; anything claiming more is treated as corrupt.
var MaxPayload = 256 << 20

// Kind is the element kind of the container.
type Kind uint16

// Element kinds.
const (
	KindPTX Kind = 1
	KindELF Kind = 2
)

func (k Kind) String() string {
	switch k {
	case KindPTX:
		return "PTX"
	case KindELF:
		return "ELF"
	}
	return fmt.Sprintf("kind(%d)", uint16(k))
}

// Element flag bits (fatbinary's own names where known).
const (
	Flag64Bit      = 0x0001
	FlagDebug      = 0x0002
	FlagLinux      = 0x0010
	FlagCompressed = 0x2000 // LZ4-style block codec (CUDA <= 12)
	FlagZstd       = 0x8000 // zstd frame (CUDA 13)
)

// Compression is the codec of an element's stored payload.
type Compression int

// Codecs.
const (
	None Compression = iota
	LZ4
	Zstd
)

func (c Compression) String() string {
	return [...]string{"none", "lz4", "zstd"}[c]
}

// Wrapper is the 24-byte structure cudart passes to __cudaRegisterFatBinary
// and, since CUDA 12, to cuLibraryLoadData.
type Wrapper struct {
	Magic     uint32
	Version   uint32
	Data      uint64 // address of the container in the process
	Filenames uint64
}

// ParseWrapper decodes a wrapper from the start of mem.
func ParseWrapper(mem []byte) (Wrapper, error) {
	if len(mem) < WrapperSize {
		return Wrapper{}, fmt.Errorf("fatbin wrapper: %d bytes at offset 0, need %d", len(mem), WrapperSize)
	}
	w := Wrapper{
		Magic:     binary.LittleEndian.Uint32(mem[0:]),
		Version:   binary.LittleEndian.Uint32(mem[4:]),
		Data:      binary.LittleEndian.Uint64(mem[8:]),
		Filenames: binary.LittleEndian.Uint64(mem[16:]),
	}
	if w.Magic != WrapperMagic {
		return w, fmt.Errorf("fatbin wrapper: magic %#x at offset 0, want %#x (is this a fatbin wrapper pointer?)", w.Magic, WrapperMagic)
	}
	return w, nil
}

// ReadFromWrapper reads the container a wrapper points to out of a process's
// memory (for example /proc/PID/mem, where offsets are addresses). The
// container's size comes from its own header and is capped by MaxPayload.
func ReadFromWrapper(mem io.ReaderAt, wrapperAddr uint64) (*Fatbin, error) {
	wb := make([]byte, WrapperSize)
	if _, err := mem.ReadAt(wb, int64(wrapperAddr)); err != nil {
		return nil, fmt.Errorf("fatbin wrapper at %#x: %w", wrapperAddr, err)
	}
	w, err := ParseWrapper(wb)
	if err != nil {
		return nil, fmt.Errorf("at %#x: %w", wrapperAddr, err)
	}
	fb, err := ReadContainerAt(mem, int64(w.Data), "memory")
	if err != nil {
		return nil, fmt.Errorf("%w (from wrapper %#x)", err, wrapperAddr)
	}
	return fb, nil
}

// ReadContainerAt reads the one container at off of r (a file: off is
// Fatbin.FileOffset; a process's memory: an address), its size from its own
// header, capped by MaxPayload. Source becomes "name@off".
func ReadContainerAt(r io.ReaderAt, off int64, name string) (*Fatbin, error) {
	hdr := make([]byte, containerHeaderSize)
	if _, err := r.ReadAt(hdr, off); err != nil {
		return nil, fmt.Errorf("fatbin container at %s@%#x: %w", name, off, err)
	}
	total, err := containerSize(hdr, 0)
	if err != nil {
		return nil, fmt.Errorf("fatbin container at %s@%#x: %w", name, off, err)
	}
	buf := make([]byte, total)
	if _, err := r.ReadAt(buf, off); err != nil {
		return nil, fmt.Errorf("fatbin container at %s@%#x, %d bytes: %w", name, off, total, err)
	}
	fb, err := parseOne(buf, 0)
	if err != nil {
		return nil, fmt.Errorf("fatbin container at %s@%#x: %w", name, off, err)
	}
	fb.Source = fmt.Sprintf("%s@%#x", name, off)
	fb.FileOffset = off
	return fb, nil
}

// Element is one PTX or cubin inside a container.
type Element struct {
	Kind       Kind
	Version    uint16 // element header version (0x0101)
	HeaderSize uint32
	// PaddedSize is the size of the stored payload including padding.
	PaddedSize uint64
	// CompressedSize is the exact size of a compressed payload (0 if stored as is).
	CompressedSize uint32
	// Major, Minor: the PTX ISA version for PTX elements, the ELF format version for cubins.
	Major, Minor uint16
	SM           int // 80 for sm_80 / compute_80
	Flags        uint64
	// UncompressedSize is the payload size after decompression (0 if not compressed).
	UncompressedSize uint64
	// Offset is the offset of the element header from the start of the
	// buffer the container was parsed from (the section, file or memory).
	Offset int64
	// Options holds the compiler options string some toolkits store in the
	// header's extension (empty if none).
	Options string

	stored []byte // payload as stored (compressed or not), aliases the input
}

// Arch is "compute_XX" for PTX and "sm_XX" for cubins.
func (e *Element) Arch() string {
	if e.Kind == KindPTX {
		return fmt.Sprintf("compute_%d", e.SM)
	}
	return fmt.Sprintf("sm_%d", e.SM)
}

// Compression reports the codec of the stored payload.
func (e *Element) Compression() Compression {
	switch {
	case e.Flags&FlagZstd != 0:
		return Zstd
	case e.Flags&FlagCompressed != 0:
		return LZ4
	}
	return None
}

// Compressed reports whether the payload is stored compressed.
func (e *Element) Compressed() bool { return e.Compression() != None }

// Stored returns the payload bytes as stored in the container.
func (e *Element) Stored() []byte { return e.stored }

// Payload returns the decompressed payload. For PTX the trailing NUL
// padding is removed, so the result is the PTX text.
func (e *Element) Payload() ([]byte, error) {
	var out []byte
	var err error
	switch e.Compression() {
	case Zstd:
		out, err = DecompressZstd(e.stored, e.UncompressedSize)
	case LZ4:
		out, err = DecompressLZ4(e.stored, e.UncompressedSize)
	default:
		out = e.stored
	}
	if err != nil {
		return nil, fmt.Errorf("%s %s element at offset %#x: %w", e.Kind, e.Arch(), e.Offset, err)
	}
	if e.Kind == KindPTX {
		for len(out) > 0 && out[len(out)-1] == 0 {
			out = out[:len(out)-1]
		}
	}
	return out, nil
}

// Fatbin is one container with its elements.
type Fatbin struct {
	Source string // file and section, or memory address
	Offset int64  // of the container header within the section or buffer
	// FileOffset is the container's offset in its file (FromELF; with
	// ReadContainerAt, the offset it was read at); 0 when not known.
	FileOffset int64
	Version    uint16
	Size       uint64 // of the elements area
	Elements   []*Element
}

// containerSize validates a container header at b[off:] and returns the
// whole container's size (header + elements).
func containerSize(b []byte, off int) (int, error) {
	if len(b)-off < containerHeaderSize {
		return 0, fmt.Errorf("truncated container header at offset %#x (%d bytes left)", off, len(b)-off)
	}
	h := b[off:]
	if m := binary.LittleEndian.Uint32(h); m != ContainerMagic {
		return 0, fmt.Errorf("container magic %#x at offset %#x, want %#x", m, off, ContainerMagic)
	}
	hs := int(binary.LittleEndian.Uint16(h[6:]))
	size := binary.LittleEndian.Uint64(h[8:])
	if hs < containerHeaderSize || hs > 4096 {
		return 0, fmt.Errorf("container at offset %#x: header size %d out of range", off, hs)
	}
	if size > uint64(MaxPayload) {
		return 0, fmt.Errorf("container at offset %#x: size %d exceeds the %d-byte limit", off, size, MaxPayload)
	}
	return hs + int(size), nil
}

// ParseContainer parses one container at the start of b and returns its
// elements. Offsets are relative to b.
func ParseContainer(b []byte) ([]*Element, error) {
	fb, err := parseOne(b, 0)
	if err != nil {
		return nil, err
	}
	return fb.Elements, nil
}

// Parse parses every container in b, which holds one or more containers
// back to back (as a .nv_fatbin section does, with alignment padding
// between them), or a wrapper followed by nothing useful (an error).
func Parse(b []byte) ([]*Fatbin, error) {
	var out []*Fatbin
	off := 0
	for off < len(b) {
		// Containers are 8-byte aligned; skip zero padding between them.
		if binary.LittleEndian.Uint32(padTo4(b[off:])) != ContainerMagic {
			if allZero(b[off:min(len(b), off+8)]) {
				off += 8
				continue
			}
			if len(out) == 0 && len(b)-off >= 4 && binary.LittleEndian.Uint32(b[off:]) == WrapperMagic {
				return nil, fmt.Errorf("offset %#x holds a fatbin wrapper, not a container: read the container it points to (ReadFromWrapper)", off)
			}
			return out, fmt.Errorf("no fatbin container magic at offset %#x", off)
		}
		fb, err := parseOne(b, off)
		if err != nil {
			return out, err
		}
		out = append(out, fb)
		off += containerHeaderSize + int(fb.Size)
		if fb.Size == 0 {
			off += 8 // never loop on an empty container
		}
	}
	return out, nil
}

func padTo4(b []byte) []byte {
	if len(b) >= 4 {
		return b
	}
	var p [4]byte
	copy(p[:], b)
	return p[:]
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

func parseOne(b []byte, off int) (*Fatbin, error) {
	total, err := containerSize(b, off)
	if err != nil {
		return nil, err
	}
	hs := int(binary.LittleEndian.Uint16(b[off+6:]))
	fb := &Fatbin{
		Offset:  int64(off),
		Version: binary.LittleEndian.Uint16(b[off+4:]),
		Size:    binary.LittleEndian.Uint64(b[off+8:]),
	}
	end := off + total
	if end > len(b) || end < off {
		return nil, fmt.Errorf("container at offset %#x: claims %d bytes, only %d present", off, total, len(b)-off)
	}
	p := off + hs
	for p < end {
		if end-p < minElementHeader {
			if allZero(b[p:end]) {
				break
			}
			return nil, fmt.Errorf("truncated element header at offset %#x (%d bytes left in container)", p, end-p)
		}
		e, next, err := parseElement(b, p, end)
		if err != nil {
			return nil, err
		}
		fb.Elements = append(fb.Elements, e)
		p = next
	}
	return fb, nil
}

func parseElement(b []byte, p, end int) (*Element, int, error) {
	h := b[p:end]
	le := binary.LittleEndian
	e := &Element{
		Kind:             Kind(le.Uint16(h[0:])),
		Version:          le.Uint16(h[2:]),
		HeaderSize:       le.Uint32(h[4:]),
		PaddedSize:       le.Uint64(h[8:]),
		CompressedSize:   le.Uint32(h[16:]),
		Minor:            le.Uint16(h[24:]),
		Major:            le.Uint16(h[26:]),
		SM:               int(le.Uint32(h[28:])),
		Flags:            le.Uint64(h[40:]),
		UncompressedSize: le.Uint64(h[56:]),
		Offset:           int64(p),
	}
	if e.Kind != KindPTX && e.Kind != KindELF {
		// Other kinds exist (e.g. NVVM IR); keep them so offsets stay right,
		// but nothing below interprets their payload.
		if e.Kind == 0 || e.Kind > 16 {
			return nil, 0, fmt.Errorf("element at offset %#x: unknown kind %d (corrupt container?)", p, e.Kind)
		}
	}
	if e.HeaderSize < minElementHeader || uint64(e.HeaderSize) > uint64(end-p) {
		return nil, 0, fmt.Errorf("element at offset %#x: header size %d out of range (%d bytes left)", p, e.HeaderSize, end-p)
	}
	if e.PaddedSize > uint64(end-p)-uint64(e.HeaderSize) {
		return nil, 0, fmt.Errorf("element at offset %#x: payload of %d bytes overruns the container (%d bytes left)", p, e.PaddedSize, uint64(end-p)-uint64(e.HeaderSize))
	}
	start := p + int(e.HeaderSize)
	n := int(e.PaddedSize)
	if e.Compressed() {
		if e.CompressedSize == 0 || uint64(e.CompressedSize) > e.PaddedSize {
			return nil, 0, fmt.Errorf("element at offset %#x: compressed size %d does not fit its %d-byte payload", p, e.CompressedSize, e.PaddedSize)
		}
		if e.UncompressedSize > uint64(MaxPayload) {
			return nil, 0, fmt.Errorf("element at offset %#x: decompressed size %d exceeds the %d-byte limit", p, e.UncompressedSize, MaxPayload)
		}
		n = int(e.CompressedSize)
	}
	e.stored = b[start : start+n]
	// Options string: offset/length at 32/36, relative to the element header.
	if oo, ol := le.Uint32(h[32:]), le.Uint32(h[36:]); ol > 0 && oo >= minElementHeader && uint64(oo)+uint64(ol) <= uint64(e.HeaderSize) {
		e.Options = trimNUL(string(h[oo : oo+ol]))
	}
	return e, start + int(e.PaddedSize), nil
}

func trimNUL(s string) string {
	for len(s) > 0 && s[len(s)-1] == 0 {
		s = s[:len(s)-1]
	}
	return s
}

// ErrNoFatbin is returned by FromELF for files without fatbin sections.
var ErrNoFatbin = errors.New("no .nv_fatbin or __nv_relfatbin section: the file has no CUDA device code")
