package runtime

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/gpubpf/gpubpf/internal/testenv"
)

// counterProg adds 1 to key 0 of map "hits" each time it runs.
func counterProg(name, section string) *ebpf.ProgramSpec {
	return &ebpf.ProgramSpec{Name: name, SectionName: section, Type: ebpf.Kprobe, License: "GPL",
		Instructions: lookupThen("hits", asm.Mov.Imm(asm.R1, 1), asm.StoreXAdd(asm.R0, asm.R1, asm.DWord))}
}

// A real process calling a function of its own a known number of times; the
// uprobe resolved by name ("exe") and by symbol provider must count them all.
func TestUprobeCountsRealCalls(t *testing.T) {
	testenv.Root(t)
	gcc := testenv.Tool(t, "gcc")
	dir := t.TempDir()
	src := filepath.Join(dir, "app.c")
	os.WriteFile(src, []byte(`
#include <stdio.h>
#include <unistd.h>
__attribute__((noinline)) int cudaLaunchKernel(int x) { return x + 1; }
int main(void) {
	char b[8];
	if (read(0, b, 1) != 1) return 2;   /* wait until the probe is attached */
	int s = 0;
	for (int i = 0; i < 25; i++) s += cudaLaunchKernel(i);
	printf("%d\n", s);
	return 0;
}`), 0o644)
	bin := filepath.Join(dir, "app")
	if out, err := exec.Command(gcc, "-O1", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	for _, section := range []string{"uprobe/exe:cudaLaunchKernel", "uprobe/libcudart.so:cudaLaunchKernel"} {
		t.Run(section, func(t *testing.T) {
			spec := &ebpf.CollectionSpec{
				Maps:     map[string]*ebpf.MapSpec{"hits": {Name: "hits", Type: MapTypeKernelShared, KeySize: 4, ValueSize: 8, MaxEntries: 1}},
				Programs: map[string]*ebpf.ProgramSpec{"p": counterProg("p", section)},
			}
			gpu, cpu, err := SplitPrograms(spec)
			if err != nil {
				t.Fatal(err)
			}
			k, err := loadKernelSide(spec, gpu, cpu)
			if err != nil {
				t.Fatal(err)
			}
			defer k.Close()
			cmd := exec.Command(bin)
			stdin, _ := cmd.StdinPipe()
			var out strings.Builder
			cmd.Stdout = &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond) // let the dynamic linker map everything
			links, err := k.attachUprobes(cpu, cmd.Process.Pid)
			if err != nil {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatal(err)
			}
			defer func() {
				for _, l := range links {
					l.Close()
				}
			}()
			stdin.Write([]byte("g"))
			if err := cmd.Wait(); err != nil {
				t.Fatal(err)
			}
			var n uint64
			if err := k.coll.Maps["hits"].Lookup(uint32(0), &n); err != nil {
				t.Fatal(err)
			}
			if n != 25 || strings.TrimSpace(out.String()) != "325" {
				t.Fatalf("uprobe counted %d calls (want 25); app printed %q", n, out.String())
			}
		})
	}
}

func TestResolveUprobeTargetErrors(t *testing.T) {
	c := CPUProgram{Spec: &ebpf.ProgramSpec{Name: "p", SectionName: "uprobe"}}
	if _, _, err := resolveUprobeTarget(c, os.Getpid()); err == nil || !strings.Contains(err.Error(), "names no function") {
		t.Errorf("bare uprobe: %v", err)
	}
	c = CPUProgram{Spec: &ebpf.ProgramSpec{Name: "p"}, Path: "libcudart.so", Symbol: "cudaMalloc"}
	if _, _, err := resolveUprobeTarget(c, 0); err == nil || !strings.Contains(err.Error(), "ABSOLUTE_PATH") {
		t.Errorf("relative path in all-process mode: %v", err)
	}
	c.Symbol = "no_such_symbol_anywhere"
	if _, _, err := resolveUprobeTarget(c, os.Getpid()); err == nil || !strings.Contains(err.Error(), "defines no_such_symbol_anywhere") {
		t.Errorf("missing symbol: %v", err)
	}
}

// Bare uprobe sections (libbpf's loaders pick their function at run time)
// need a target from --attach; Open refuses them without one, and refuses a
// target for anything but a bare uprobe, before it loads anything.
func TestBareUprobeTargets(t *testing.T) {
	spec := func() *ebpf.CollectionSpec {
		return &ebpf.CollectionSpec{
			Maps: map[string]*ebpf.MapSpec{"hits": {Name: "hits", Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 2}},
			Programs: map[string]*ebpf.ProgramSpec{
				"enter": counterProg("enter", "uprobe"),
				"leave": counterProg("leave", "uretprobe"),
				"named": counterProg("named", "uprobe/libc.so.6:malloc"),
				"gpu":   counterProg("gpu", "kprobe/_Z6vecAddPfi"),
			},
		}
	}
	for _, tc := range []struct {
		name    string
		keep    []string
		targets map[string]UprobeTarget
		want    []string // in the error; none: accepted
	}{
		{"one bare, no target", []string{"enter", "named"}, nil,
			[]string{`program enter (section "uprobe") names no function`, `SEC("uprobe/libcudart.so:cudaLaunchKernel")`, "--attach enter=SYMBOL[@PATH]"}},
		{"uretprobe, no target", []string{"leave"}, nil,
			[]string{`program leave (section "uretprobe")`, `SEC("uretprobe/libcudart.so:cudaLaunchKernel")`, "--attach leave=SYMBOL[@PATH]"}},
		{"two bare, one target", nil, map[string]UprobeTarget{"enter": {Symbol: "f"}},
			[]string{`program leave (section "uretprobe") names no function`}},
		{"two bare, no target", nil, nil,
			[]string{`programs enter (section "uprobe"), leave (section "uretprobe") name no function`, "--attach NAME=SYMBOL[@PATH] for each"}},
		{"unknown program", nil, map[string]UprobeTarget{"enter": {Symbol: "f"}, "leave": {Symbol: "f"}, "nope": {Symbol: "f", Flag: "nope=f"}},
			[]string{"--attach nope=f: the object has no program nope; its bare uprobe programs are enter, leave"}},
		{"a uprobe with its own target", nil, map[string]UprobeTarget{"enter": {Symbol: "f"}, "leave": {Symbol: "f"}, "named": {Symbol: "f"}},
			[]string{`--attach named=f: program named (section "uprobe/libc.so.6:malloc") names its function already`}},
		{"a GPU program", nil, map[string]UprobeTarget{"enter": {Symbol: "f"}, "leave": {Symbol: "f"}, "gpu": {Symbol: "f", Path: "/x"}},
			[]string{`--attach gpu=f@/x: program gpu (section "kprobe/_Z6vecAddPfi") is not a uprobe`}},
		{"left out by --program", []string{"enter"}, map[string]UprobeTarget{"enter": {Symbol: "f"}, "leave": {Symbol: "f"}},
			[]string{"--attach leave=f: program leave is left out by --program; add --program leave"}},
		{"every bare program has a target", nil, map[string]UprobeTarget{"enter": {Symbol: "f"}, "leave": {Symbol: "g", Path: "libc.so.6"}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			all := spec()
			s := all
			if tc.keep != nil {
				s = &ebpf.CollectionSpec{Maps: all.Maps, Programs: map[string]*ebpf.ProgramSpec{}}
				for _, k := range tc.keep {
					s.Programs[k] = all.Programs[k]
				}
			}
			_, cpu, err := SplitPrograms(s)
			if err != nil {
				t.Fatal(err)
			}
			err = bindUprobes(all, cpu, tc.targets)
			if tc.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				for _, c := range cpu {
					switch c.Spec.Name {
					case "enter":
						if c.Symbol != "f" || c.Path != "exe" {
							t.Errorf("enter bound to %s:%s, want the executable's f", c.Path, c.Symbol)
						}
					case "leave":
						if c.Symbol != "g" || c.Path != "libc.so.6" || !c.Return {
							t.Errorf("leave bound to %s:%s (return %v), want libc.so.6:g", c.Path, c.Symbol, c.Return)
						}
					}
				}
				return
			}
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\ndoes not say %q", err, w)
				}
			}
		})
	}
	// Open says it before anything is loaded into the kernel.
	if _, err := Open(spec(), Options{}); err == nil || !strings.Contains(err.Error(), "name no function") {
		t.Fatalf("Open of bare uprobes without targets: %v", err)
	}
}

// What the targets must offer the uprobes is checked before anything
// starts: a function in the traced executable, an absolute path when every
// process is traced.
func TestCheckTargetsUprobes(t *testing.T) {
	gcc := testenv.Tool(t, "gcc")
	exe := filepath.Join(t.TempDir(), "app")
	src := exe + ".c"
	os.WriteFile(src, []byte("__attribute__((noinline)) int target_fn(int x) { return x + 1; }\nint main(void) { return target_fn(0) - 1; }\n"), 0o644)
	if out, err := exec.Command(gcc, "-O1", "-o", exe, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	prog := func(sym, path, flag string) *Session {
		return &Session{cpu: []CPUProgram{{Spec: &ebpf.ProgramSpec{Name: "p", SectionName: "uprobe"}, Symbol: sym, Path: path, Flag: flag}}}
	}
	for _, tc := range []struct {
		name string
		s    *Session
		t    Targets
		want string // "" accepted
	}{
		{"function of the command", prog("target_fn", "exe", "p=target_fn"), Targets{Command: []string{exe}}, ""},
		{"function of a file", prog("target_fn", exe, "p=target_fn@"+exe), Targets{PIDs: []int{os.Getpid()}}, ""},
		{"missing in the command", prog("no_such_fn", "exe", "p=no_such_fn"), Targets{Command: []string{exe}},
			"program p (--attach p=no_such_fn): " + exe + " defines no function no_such_fn; list the functions it defines with: nm"},
		{"missing in a running process", prog("no_such_fn", "exe", "p=no_such_fn"), Targets{PIDs: []int{os.Getpid()}}, "defines no function no_such_fn"},
		{"missing file", prog("f", "/nonexistent/lib.so", "p=f@/nonexistent/lib.so"), Targets{Command: []string{exe}}, "/nonexistent/lib.so does not exist"},
		{"every process, library name", prog("f", "libcudart.so", "p=f@libcudart.so"), Targets{},
			"tracing every process needs an absolute path (--attach p=f@/path/to/file)"},
		{"library name in a command: resolved in the process", prog("f", "libcudart.so", "p=f@libcudart.so"), Targets{Command: []string{exe}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.s.checkUprobeTargets(tc.t)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
}
