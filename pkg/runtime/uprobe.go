package runtime

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cilium/ebpf/link"

	"github.com/gpubpf/gpubpf/pkg/links"

	"github.com/gpubpf/gpubpf/pkg/procmaps"
)

// resolveUprobeTarget finds the file a CPU program's uprobe goes on in
// process pid. PATH in "uprobe/PATH:SYMBOL" may be absolute, or the name of
// a library ("libcudart.so" matches libcudart.so.13.0.48) or of the
// executable ("app", or "exe" for whatever pid runs). When no mapped object
// has that name, the object that defines SYMBOL is used: for a program
// written against libcudart.so this finds cudart linked statically into the
// executable (nvcc's default), which is what users mean.
func resolveUprobeTarget(c CPUProgram, pid int) (string, error) {
	if c.Symbol == "" {
		return "", fmt.Errorf("program %s: section %q names no symbol: write it as uprobe/PATH:SYMBOL (e.g. uprobe/libcudart.so:cudaLaunchKernel)", c.Spec.Name, c.Spec.SectionName)
	}
	if filepath.IsAbs(c.Path) {
		p := procmaps.HostPath(pid, c.Path)
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("program %s: %s: %w", c.Spec.Name, c.Path, err)
		}
		return p, nil
	}
	if pid <= 0 {
		return "", fmt.Errorf("program %s: %q is not an absolute path; tracing every process needs uprobe/ABSOLUTE_PATH:%s (or trace one process with -p / -- CMD)", c.Spec.Name, c.Path, c.Symbol)
	}
	ms, err := procmaps.Read(pid)
	if err != nil {
		return "", err
	}
	exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	exe = strings.TrimSuffix(exe, " (deleted)")
	name := filepath.Base(c.Path)
	if name == "exe" || name == "app" || name == filepath.Base(exe) {
		return procmaps.HostPath(pid, exe), nil
	}
	if libs := ms.Matching(procmaps.LibraryMatcher(name)); len(libs) > 0 {
		return procmaps.HostPath(pid, libs[0]), nil
	}
	if p, err := procmaps.Provider(pid, ms, c.Symbol); err == nil {
		return procmaps.HostPath(pid, p), nil
	}
	return "", fmt.Errorf("program %s: process %d maps no %s and no object it maps defines %s", c.Spec.Name, pid, c.Path, c.Symbol)
}

// attachUprobes attaches every CPU program to process pid (pid 0: every
// process, absolute paths only).
func (k *kernelSide) attachUprobes(cpu []CPUProgram, pid int) ([]link.Link, error) {
	var attached []link.Link
	fail := func(err error) ([]link.Link, error) {
		links.CloseAll(attached)
		return nil, err
	}
	for _, c := range cpu {
		path, err := resolveUprobeTarget(c, pid)
		if err != nil {
			return fail(err)
		}
		ex, err := link.OpenExecutable(path)
		if err != nil {
			return fail(fmt.Errorf("program %s: %w", c.Spec.Name, err))
		}
		prog := k.coll.Programs[c.Spec.Name]
		opts := &link.UprobeOptions{PID: pid}
		var l link.Link
		if c.Return {
			l, err = ex.Uretprobe(c.Symbol, prog, opts)
		} else {
			l, err = ex.Uprobe(c.Symbol, prog, opts)
		}
		if err != nil {
			return fail(fmt.Errorf("program %s: attaching to %s in %s: %w", c.Spec.Name, c.Symbol, path, err))
		}
		attached = append(attached, l)
	}
	return attached, nil
}
