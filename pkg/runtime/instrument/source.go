package instrument

import (
	"errors"
	"fmt"
	"os"

	"github.com/gpubpf/gpubpf/pkg/runtime/fatbin"
)

// PTXFromFile returns the PTX module that defines the first kernel pattern
// selects, read from an executable or shared library (its embedded
// fatbins: the newest PTX that has the kernel), a fatbin file or a .ptx
// text file (returned whole), and the kernel's mangled name ("" for a .ptx
// file, which is not searched).
func PTXFromFile(path, pattern string) (src, kernel string, err error) {
	fbs, err := fatbin.FromFile(path)
	if errors.Is(err, fatbin.ErrNotFatbinFile) {
		data, err := os.ReadFile(path)
		return string(data), "", err
	}
	if err != nil {
		return "", "", err
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
