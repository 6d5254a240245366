package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/cilium/ebpf"
)

// buildHint is how a BPF object is made, for messages about files that are
// not one.
const buildHint = "build one with clang -O2 -g -target bpf -c PROG.bpf.c -o PROG.bpf.o"

// loadObject reads a BPF object file, saying what is wrong with a file
// that is not one in the user's terms (no such file, not ELF, an ELF for
// another machine) rather than the ELF reader's.
func loadObject(file string) (*ebpf.CollectionSpec, error) {
	f, err := os.Open(file)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%s: no such file; give the path of a BPF object, or %s", file, buildHint)
		}
		return nil, fmt.Errorf("cannot read %s: %w", file, err)
	}
	magic := make([]byte, 4)
	_, err = io.ReadFull(f, magic)
	f.Close()
	if err != nil || !bytes.Equal(magic, []byte("\x7fELF")) {
		if st, serr := os.Stat(file); serr == nil && st.IsDir() {
			return nil, fmt.Errorf("%s is a directory, not a BPF object; give the .o file, or %s", file, buildHint)
		}
		return nil, fmt.Errorf("%s is not an ELF file, so not a BPF object: %s", file, buildHint)
	}
	spec, err := ebpf.LoadCollectionSpec(file)
	if err != nil {
		return nil, fmt.Errorf("%s is not a BPF object gpubpf can read (%v): %s", file, err, buildHint)
	}
	return spec, nil
}
