package runtime

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cilium/ebpf"
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
func resolveUprobeTarget(c CPUProgram, pid int) (host, shown string, err error) {
	if c.Symbol == "" {
		return "", "", fmt.Errorf("%s names no function: write the section as uprobe/PATH:SYMBOL (e.g. uprobe/libcudart.so:cudaLaunchKernel), or pass --attach %s=SYMBOL[@PATH]", c.where(), c.Spec.Name)
	}
	if filepath.IsAbs(c.Path) {
		p := procmaps.HostPath(pid, c.Path)
		if _, err := os.Stat(p); err != nil {
			return "", "", fmt.Errorf("%s: %s does not exist: give the path of the file that defines %s", c.where(), c.Path, c.Symbol)
		}
		return p, c.Path, nil
	}
	if pid <= 0 {
		return "", "", fmt.Errorf("%s: %q is not an absolute path; tracing every process needs one (uprobe/ABSOLUTE_PATH:%s), or trace one process with -p PID or -- CMD", c.where(), c.Path, c.Symbol)
	}
	ms, err := procmaps.Read(pid)
	if err != nil {
		return "", "", err
	}
	exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	exe = strings.TrimSuffix(exe, " (deleted)")
	name := filepath.Base(c.Path)
	if name == "exe" || name == "app" || name == filepath.Base(exe) {
		return procmaps.HostPath(pid, exe), exe, nil
	}
	if libs := ms.Matching(procmaps.LibraryMatcher(name)); len(libs) > 0 {
		return procmaps.HostPath(pid, libs[0]), libs[0], nil
	}
	if p, err := procmaps.Provider(pid, ms, c.Symbol); err == nil {
		return procmaps.HostPath(pid, p), p, nil
	}
	return "", "", fmt.Errorf("%s: process %d maps no %s, and no object it maps defines %s; check the names (nm -D LIBRARY lists a library's functions)", c.where(), pid, c.Path, c.Symbol)
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
		path, shown, err := resolveUprobeTarget(c, pid)
		if err != nil {
			return fail(err)
		}
		ex, err := link.OpenExecutable(path)
		if err != nil {
			return fail(fmt.Errorf("%s: %s cannot take a uprobe: %w", c.where(), shown, err))
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
			return fail(fmt.Errorf("%s: cannot attach to %s in %s: %w; list the functions it defines with: nm -D %s", c.where(), c.Symbol, shown, err, shown))
		}
		attached = append(attached, l)
	}
	return attached, nil
}

// UprobeTarget is the function a bare uprobe or uretprobe program attaches
// to (gpubpf run --attach PROG=SYMBOL[@PATH]).
type UprobeTarget struct {
	Symbol string
	// Path is absolute, or a library name resolved in the traced process
	// as a section's PATH is ("libcudart.so"); "" is the traced
	// executable.
	Path string
	// Flag is the option as the user wrote it, for messages.
	Flag string
}

// where says how the user named a CPU program's target, for messages.
func (c CPUProgram) where() string {
	if c.Flag != "" {
		return fmt.Sprintf("program %s (--attach %s)", c.Spec.Name, c.Flag)
	}
	return fmt.Sprintf("program %s (section %q)", c.Spec.Name, c.Spec.SectionName)
}

// bindUprobes gives the bare uprobe programs of cpu their targets and
// refuses, before anything is loaded or started, a bare program without
// one and a target for a program that is not a bare uprobe. all is the
// object before --program kept some of its programs.
func bindUprobes(all *ebpf.CollectionSpec, cpu []CPUProgram, targets map[string]UprobeTarget) error {
	idx := map[string]int{}
	for i, c := range cpu {
		idx[c.Spec.Name] = i
	}
	var bareNames []string
	for _, name := range sortedKeys(all.Programs) {
		if sec := all.Programs[name].SectionName; sec == "uprobe" || sec == "uretprobe" {
			bareNames = append(bareNames, name)
		}
	}
	for _, prog := range sortedKeys(targets) {
		t := targets[prog]
		flag := t.Flag
		if flag == "" {
			flag = prog + "=" + t.Symbol
			if t.Path != "" {
				flag += "@" + t.Path
			}
		}
		i, ok := idx[prog]
		switch {
		case ok && cpu[i].Bare():
			cpu[i].Symbol, cpu[i].Path, cpu[i].Flag = t.Symbol, t.Path, flag
			if t.Path == "" {
				cpu[i].Path = "exe"
			}
		case ok:
			return fmt.Errorf("--attach %s: program %s (section %q) names its function already; --attach is for programs in a bare SEC(\"uprobe\") or SEC(\"uretprobe\")", flag, prog, cpu[i].Spec.SectionName)
		case all.Programs[prog] == nil && len(bareNames) == 0:
			return fmt.Errorf("--attach %s: the object has no program %s, and no program in a bare SEC(\"uprobe\") or SEC(\"uretprobe\") to attach", flag, prog)
		case all.Programs[prog] == nil:
			return fmt.Errorf("--attach %s: the object has no program %s; its bare uprobe programs are %s", flag, prog, strings.Join(bareNames, ", "))
		case !slices.Contains(bareNames, prog):
			return fmt.Errorf("--attach %s: program %s (section %q) is not a uprobe; --attach is for programs in a bare SEC(\"uprobe\") or SEC(\"uretprobe\")", flag, prog, all.Programs[prog].SectionName)
		default:
			return fmt.Errorf("--attach %s: program %s is left out by --program; add --program %s to run it", flag, prog, prog)
		}
	}
	var bare []CPUProgram
	for _, c := range cpu {
		if c.Bare() && c.Symbol == "" {
			bare = append(bare, c)
		}
	}
	switch {
	case len(bare) == 1:
		c := bare[0]
		return fmt.Errorf("program %s (section %q) names no function to attach to (its own loader would pick one at run time): "+
			"write the target into the section, e.g. SEC(\"%s/libcudart.so:cudaLaunchKernel\"), or pass --attach %s=SYMBOL[@PATH]",
			c.Spec.Name, c.Spec.SectionName, c.Spec.SectionName, c.Spec.Name)
	case len(bare) > 1:
		var names []string
		for _, c := range bare {
			names = append(names, fmt.Sprintf("%s (section %q)", c.Spec.Name, c.Spec.SectionName))
		}
		return fmt.Errorf("programs %s name no function to attach to (their own loader would pick one at run time): "+
			"write the target into each section, e.g. SEC(\"uprobe/libcudart.so:cudaLaunchKernel\"), or pass --attach NAME=SYMBOL[@PATH] for each",
			strings.Join(names, ", "))
	}
	return nil
}

// CheckTargets is Targets.Check and what the session's uprobes need of the
// targets, so that a tool refuses before it starts or attaches anything:
// tracing every process needs absolute uprobe paths, and a function the
// user named in the traced executable or in a file must be there.
func (s *Session) CheckTargets(t Targets) error {
	if err := t.Check(); err != nil {
		return err
	}
	return s.checkUprobeTargets(t)
}

func (s *Session) checkUprobeTargets(t Targets) error {
	for _, c := range s.cpu {
		if t.All() && !filepath.IsAbs(c.Path) {
			if c.Flag != "" {
				return fmt.Errorf("%s: tracing every process needs an absolute path (--attach %s=%s@/path/to/file), or trace one process with -p PID or -- CMD",
					c.where(), c.Spec.Name, c.Symbol)
			}
			return fmt.Errorf("%s: tracing every process needs an absolute path (uprobe/ABSOLUTE_PATH:%s), or trace one process with -p PID or -- CMD",
				c.where(), c.Symbol)
		}
		var files []string
		switch {
		case filepath.IsAbs(c.Path) && len(t.PIDs) > 0:
			for _, pid := range t.PIDs {
				files = append(files, procmaps.HostPath(pid, c.Path))
			}
		case filepath.IsAbs(c.Path):
			files = append(files, c.Path)
		case c.Path == "exe" && len(t.Command) > 0:
			if p, err := exec.LookPath(t.Command[0]); err == nil {
				files = append(files, p)
			}
		case c.Path == "exe":
			for _, pid := range t.PIDs {
				files = append(files, fmt.Sprintf("/proc/%d/exe", pid))
			}
		}
		for _, f := range files {
			shown := f
			if len(t.Command) > 0 && c.Path == "exe" {
				shown = t.Command[0]
			}
			if _, err := os.Stat(f); err != nil {
				return fmt.Errorf("%s: %s does not exist: give the path of the file that defines %s", c.where(), shown, c.Symbol)
			}
			defs, err := procmaps.DefinedFunctions(f)
			if err != nil {
				return fmt.Errorf("%s: %s is not an ELF program or library that a uprobe can go on: %w", c.where(), shown, err)
			}
			if !defs[c.Symbol] {
				return fmt.Errorf("%s: %s defines no function %s; list the functions it defines with: nm %s (C++ names are mangled)", c.where(), shown, c.Symbol, shown)
			}
		}
	}
	return nil
}
