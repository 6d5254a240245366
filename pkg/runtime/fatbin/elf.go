package fatbin

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
)

// fatbinSections are the ELF sections that hold containers: .nv_fatbin for
// executable device code, __nv_relfatbin for relocatable (-rdc) code.
var fatbinSections = []string{".nv_fatbin", "__nv_relfatbin"}

// ErrNotFatbinFile: a file is neither an ELF file nor a fatbin (FromFile).
var ErrNotFatbinFile = errors.New("neither starts as an ELF file nor as a fatbin")

// FromFile returns the fatbin containers of an ELF file (an executable or
// shared library: FromELF) or of a fatbin file (nvcc -fatbin), told apart
// by their first four bytes. A file that is neither (a .ptx text file, say)
// gives an error wrapping ErrNotFatbinFile.
func FromFile(path string) ([]*Fatbin, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var head [4]byte
	if n, _ := io.ReadFull(f, head[:]); n == len(head) {
		switch {
		case string(head[:]) == elf.ELFMAG:
			return FromELFReader(f, path)
		case binary.LittleEndian.Uint32(head[:]) == ContainerMagic:
			data, err := os.ReadFile(path)
			if err != nil {
				return nil, err
			}
			fbs, err := Parse(data)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			for _, fb := range fbs {
				fb.Source = path
			}
			return fbs, nil
		}
	}
	return nil, fmt.Errorf("%s: not a readable ELF file or fatbin: %w", path, ErrNotFatbinFile)
}

// FromELF returns every fatbin container of an executable or shared library.
func FromELF(path string) ([]*Fatbin, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s: not a readable ELF file: %w", path, err)
	}
	defer f.Close()
	return fromELFFile(f, path)
}

// FromELFReader is FromELF for an ELF image already in memory or open.
func FromELFReader(r io.ReaderAt, name string) ([]*Fatbin, error) {
	f, err := elf.NewFile(r)
	if err != nil {
		return nil, fmt.Errorf("%s: not a readable ELF file: %w", name, err)
	}
	return fromELFFile(f, name)
}

func fromELFFile(f *elf.File, path string) ([]*Fatbin, error) {
	var out []*Fatbin
	found := false
	for _, name := range fatbinSections {
		s := f.Section(name)
		if s == nil || s.Type == elf.SHT_NOBITS {
			continue
		}
		found = true
		if s.Size > uint64(MaxPayload)*4 {
			return nil, fmt.Errorf("%s: section %s is %d bytes, over the %d-byte limit", path, name, s.Size, MaxPayload*4)
		}
		data, err := sectionData(s)
		if err != nil {
			return nil, fmt.Errorf("%s: reading section %s: %w", path, name, err)
		}
		fbs, err := Parse(data)
		for _, fb := range fbs {
			fb.Source = path + ":" + name
			if s.Flags&elf.SHF_COMPRESSED == 0 {
				fb.FileOffset = int64(s.Offset) + fb.Offset
			}
		}
		out = append(out, fbs...)
		if err != nil {
			return out, fmt.Errorf("%s: section %s (file offset %#x): %w", path, name, s.Offset, err)
		}
	}
	if !found {
		return nil, fmt.Errorf("%s: %w", path, ErrNoFatbin)
	}
	return out, nil
}

// sectionData reads an uncompressed section in one read into one buffer:
// Section.Data grows its buffer as it reads, which copied libcublasLt's
// 575 MB section over and over (half of the 8 s a -p index of it took).
// The last byte is read first, so a header claiming more than the file
// holds allocates nothing.
func sectionData(s *elf.Section) ([]byte, error) {
	if s.Flags&elf.SHF_COMPRESSED != 0 || s.Size == 0 {
		return s.Data()
	}
	var last [1]byte
	if _, err := s.ReadAt(last[:], int64(s.Size)-1); err != nil {
		return nil, fmt.Errorf("%d bytes claimed, fewer in the file: %w", s.Size, err)
	}
	data := make([]byte, s.Size)
	if _, err := s.ReadAt(data, 0); err != nil {
		return nil, err
	}
	return data, nil
}

// DeviceCodeBytes is the size of path's fatbin sections, from its section
// headers alone (0 for a file that is not ELF or has none): what reading
// its device code will cost, before it is read.
func DeviceCodeBytes(path string) int64 {
	f, err := elf.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	var n int64
	for _, name := range fatbinSections {
		if s := f.Section(name); s != nil && s.Type != elf.SHT_NOBITS {
			n += int64(s.Size)
		}
	}
	return n
}

// IsNoFatbin reports whether err says the file has no device code.
func IsNoFatbin(err error) bool { return errors.Is(err, ErrNoFatbin) }
