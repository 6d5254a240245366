package fatbin

import (
	"debug/elf"
	"errors"
	"fmt"
	"io"
)

// fatbinSections are the ELF sections that hold containers: .nv_fatbin for
// executable device code, __nv_relfatbin for relocatable (-rdc) code.
var fatbinSections = []string{".nv_fatbin", "__nv_relfatbin"}

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
		data, err := s.Data()
		if err != nil {
			return nil, fmt.Errorf("%s: reading section %s: %w", path, name, err)
		}
		fbs, err := Parse(data)
		for _, fb := range fbs {
			fb.Source = path + ":" + name
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

// IsNoFatbin reports whether err says the file has no device code.
func IsNoFatbin(err error) bool { return errors.Is(err, ErrNoFatbin) }
