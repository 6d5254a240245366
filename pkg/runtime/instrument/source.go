package instrument

import (
	"bytes"
	"fmt"
	"os"

	"github.com/gpubpf/gpubpf/pkg/runtime/fatbin"
)

// fatbinMagic starts a fatbin container (a .fatbin file, nvcc -fatbin).
var fatbinMagic = []byte{0x50, 0xed, 0x55, 0xba}

// PTXFromFile returns the PTX module that defines the first kernel pattern
// selects, read from an executable or shared library (its embedded
// fatbins: the newest PTX that has the kernel), a fatbin file or a .ptx
// text file (returned whole), and the kernel's mangled name ("" for a .ptx
// file, which is not searched).
func PTXFromFile(path, pattern string) (src, kernel string, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", "", err
	}
	var fbs []*fatbin.Fatbin
	switch {
	case bytes.HasPrefix(data, []byte("\x7fELF")):
		if fbs, err = fatbin.FromELF(path); err != nil {
			return "", "", err
		}
	case bytes.HasPrefix(data, fatbinMagic):
		if fbs, err = fatbin.Parse(data); err != nil {
			return "", "", fmt.Errorf("%s: %w", path, err)
		}
	default:
		return string(data), "", nil
	}
	ks, err := fatbin.Inventory(fbs...)
	if err != nil && len(ks) == 0 {
		return "", "", fmt.Errorf("%s: %w", path, err)
	}
	var all []string
	for _, k := range ks {
		all = append(all, k.Name)
	}
	m, _ := Match([]string{pattern}, all)
	if len(m) == 0 {
		return "", "", fmt.Errorf("%s: no kernel matches %q (its kernels: %d; list them with gpubpf kernels)", path, pattern, len(all))
	}
	_, p, err := fatbin.PTXFor(fbs, m[0], 0)
	if err != nil {
		return "", "", fmt.Errorf("%s: kernel %s: %w", path, m[0], err)
	}
	return string(p), m[0], nil
}
