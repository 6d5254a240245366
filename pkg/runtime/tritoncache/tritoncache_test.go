package tritoncache

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/gpubpf/gpubpf/pkg/procmaps"
)

func write(t *testing.T, path string, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A loaded cubin gets the PTX next to the cached cubin it equals byte for
// byte, and nothing else: not another compilation of the same kernel name,
// not a cubin whose PTX is gone; one added later is found.
func TestPTXFor(t *testing.T) {
	dir := t.TempDir()
	const name = "triton_poi_fused_relu_0"
	write(t, filepath.Join(dir, "AAAA", name+".cubin"), "\x7fELF cubin one")
	write(t, filepath.Join(dir, "AAAA", name+".ptx"), ".version 8.7\n.visible .entry "+name+"() { ret; }\n")
	write(t, filepath.Join(dir, "BBBB", name+".cubin"), "\x7fELF cubin two")
	write(t, filepath.Join(dir, "BBBB", name+".ptx"), ".version 8.7\n.visible .entry "+name+"() { exit; }\n")
	write(t, filepath.Join(dir, "CCCC", "triton_red_0.cubin"), "\x7fELF cubin 333")
	write(t, filepath.Join(dir, "too", "deep", "for", "the", "walk", "x.cubin"), "\x7fELF cubin one")
	c := New()
	c.maxAge = 0
	ptx, path, ok := c.PTXFor([]byte("\x7fELF cubin two"), []string{dir})
	if !ok || path != filepath.Join(dir, "BBBB", name+".ptx") || string(ptx) != ".version 8.7\n.visible .entry "+name+"() { exit; }\n" {
		t.Fatalf("got %q from %q (%v)", ptx, path, ok)
	}
	if _, _, ok := c.PTXFor([]byte("\x7fELF cubin tw0"), []string{dir}); ok {
		t.Errorf("a cubin of the same size and other bytes matched")
	}
	if _, _, ok := c.PTXFor([]byte("\x7fELF cubin 333"), []string{dir}); ok {
		t.Errorf("a cached cubin without its PTX matched")
	}
	if _, _, ok := c.PTXFor([]byte("\x7fELF cubin three"), []string{dir}); ok {
		t.Errorf("a cubin not cached matched")
	}
	write(t, filepath.Join(dir, "DDDD", "late.cubin"), "\x7fELF cubin three")
	write(t, filepath.Join(dir, "DDDD", "late.ptx"), ".visible .entry late() { ret; }")
	if _, path, ok := c.PTXFor([]byte("\x7fELF cubin three"), []string{dir}); !ok || filepath.Base(path) != "late.ptx" {
		t.Errorf("a kernel compiled later was not found: %q %v", path, ok)
	}
}

// Dirs reads the process's own environment, not the tool's.
func TestDirs(t *testing.T) {
	tc, home := t.TempDir(), t.TempDir()
	os.MkdirAll(filepath.Join(home, ".triton", "cache"), 0o755)
	ind := t.TempDir()
	os.MkdirAll(filepath.Join(ind, "triton"), 0o755)
	cmd := exec.Command("sleep", "30")
	cmd.Env = []string{"TRITON_CACHE_DIR=" + tc, "HOME=" + home, "TORCHINDUCTOR_CACHE_DIR=" + ind, "USER=nobody-here"}
	if err := cmd.Start(); err != nil {
		t.Skip(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	// the child's environment is its own once it has exec'd
	for i := 0; i < 100 && procmaps.Environ(cmd.Process.Pid)["TRITON_CACHE_DIR"] == ""; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	got := Dirs(cmd.Process.Pid)
	want := []string{tc, filepath.Join(ind, "triton"), filepath.Join(home, ".triton", "cache")}
	if !slices.Equal(got, want) {
		t.Errorf("Dirs = %v, want %v", got, want)
	}
}
