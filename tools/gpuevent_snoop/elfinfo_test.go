package gpuevent_snoop

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpubpf/gpubpf/internal/testenv"
)

func TestChoosePoint(t *testing.T) {
	for _, tc := range []struct {
		name    string
		code    []byte
		hasSize bool
		off     uint64
		stepped bool
	}{
		{"push", []byte{0x41, 0x56, 0x41, 0x55}, true, 0, false},
		{"push rbp", []byte{0x55, 0x48, 0x89, 0xe5}, true, 0, false},
		{"sub rsp", []byte{0x48, 0x83, 0xec, 0x30, 0x55}, true, 0, true},
		{"mov", []byte{0x48, 0x89, 0xf8, 0xe9, 0, 0, 0, 0}, true, 0, true},
		{"endbr64 push", []byte{0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x48, 0x89, 0xe5, 0xc3}, true, 4, false},
		{"endbr64 push, size unknown", []byte{0xf3, 0x0f, 0x1e, 0xfa, 0x55}, false, 0, true},
		// jmp rel8 at 5 back to 4: the probe at +4 would fire twice.
		{"endbr64 push, loop to +4", []byte{0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0xeb, 0xfd}, true, 0, true},
		{"endbr64 sub", []byte{0xf3, 0x0f, 0x1e, 0xfa, 0x48, 0x83, 0xec, 0x30}, true, 0, true},
		{"nop5", []byte{0x0f, 0x1f, 0x44, 0x00, 0x00, 0x55}, true, 0, false},
		{"endbr64 nop5", []byte{0xf3, 0x0f, 0x1e, 0xfa, 0x0f, 0x1f, 0x44, 0x00, 0x00}, true, 4, false},
		{"jmp", []byte{0xe9, 1, 2, 3, 4}, true, 0, false},
		{"empty", nil, true, 0, true},
	} {
		p := choosePoint(tc.code, tc.hasSize)
		if p.off != tc.off || p.stepped != tc.stepped || p.note == "" {
			t.Errorf("%s: %+v, want off %d stepped %v", tc.name, p, tc.off, tc.stepped)
		}
	}
}

// readELFInfo on real objects: the probe points of a CET-built function
// (endbr64 first) skip it, imports and names of the driver's launch
// functions are found.
func TestReadELFInfo(t *testing.T) {
	gcc := testenv.Tool(t, "gcc")
	dir := t.TempDir()
	src := filepath.Join(dir, "a.c")
	os.WriteFile(src, []byte(`
int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
	unsigned shmem, void *stream, void **params, void **extra);
int (*byname)(void);
__attribute__((noinline)) int cudaLaunchKernel(const void *f, int x) { int r = byname(); return f ? x + r + byname() : r; }
int main(int argc, char **argv) { return argc > 5 ? cuLaunchKernel(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0) : cudaLaunchKernel(argv, 1); }
`), 0o644)
	lib := filepath.Join(dir, "libcuda.so.1")
	os.WriteFile(filepath.Join(dir, "l.c"), []byte("int cuLaunchKernel(void) { return 0; }\n"), 0o644)
	bin := filepath.Join(dir, "a")
	for _, args := range [][]string{
		{"-O2", "-fPIC", "-shared", "-o", lib, filepath.Join(dir, "l.c")},
		{"-O2", "-fcf-protection=full", "-o", bin, src, lib},
	} {
		if out, err := exec.Command(gcc, args...).CombinedOutput(); err != nil {
			t.Skipf("gcc cannot build a CET program here: %v\n%s", err, out)
		}
	}
	in, err := readELFInfo(bin, apiNames)
	if err != nil {
		t.Fatal(err)
	}
	fn, ok := in.funcs["cudaLaunchKernel"]
	if !ok {
		t.Fatalf("cudaLaunchKernel not found: %+v", in)
	}
	if len(in.imports) != 1 || in.imports[0] != "cuLaunchKernel" {
		t.Errorf("imports %v, want [cuLaunchKernel]", in.imports)
	}
	if !in.mentions {
		t.Errorf("the dynamic string table names cuLaunchKernel, but mentions is false")
	}
	// endbr64, then the push of a callee-saved register.
	if fn.probe.off != 4 || fn.probe.stepped {
		t.Errorf("cudaLaunchKernel probe %+v, want at +4 (after endbr64)", fn.probe)
	}
}

// A process that exited but is not reaped yet (a zombie) reads as no
// mappings: the resolver keeps those it read while the process ran.
func TestResolverKeepsMapsOfZombie(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Skipf("cannot start sleep: %v", err)
	}
	defer cmd.Wait()
	pid := cmd.Process.Pid
	r := NewResolver()
	r.Prime(uint32(pid))
	if n := len(r.procs[uint32(pid)].maps); n == 0 {
		t.Fatal("no mappings read from a running process")
	}
	cmd.Process.Kill()
	for i := 0; ; i++ {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err == nil && strings.Contains(string(b), ") Z ") {
			break
		}
		if i > 500 {
			t.Fatalf("process %d did not become a zombie", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
	r.Prime(uint32(pid))
	if pi := r.procs[uint32(pid)]; len(pi.maps) == 0 || !pi.gone {
		t.Fatalf("after exit: %d mappings kept, gone %v; want the running process's, gone", len(pi.maps), pi.gone)
	}
}
