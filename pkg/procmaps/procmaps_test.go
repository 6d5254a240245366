package procmaps

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const sample = `55d0c0a00000-55d0c0a02000 r--p 00000000 fd:01 1234                       /usr/bin/app with space
55d0c0a02000-55d0c0a08000 r-xp 00002000 fd:01 1234                       /usr/bin/app with space
7f0000000000-7f0000100000 rw-p 00000000 00:00 0 
7f1000000000-7f1000200000 r-xp 00010000 fd:01 99                         /usr/lib/x86_64-linux-gnu/libcudart.so.12.4.127
7f2000000000-7f2000300000 r-xp 00000000 fd:01 98                         /usr/lib/x86_64-linux-gnu/libcuda.so.1 (deleted)
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]
`

func TestParse(t *testing.T) {
	ms, err := Parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 6 {
		t.Fatalf("%d mappings", len(ms))
	}
	if ms[0].Path != "/usr/bin/app with space" || ms[1].Offset != 0x2000 || !ms[1].Exec() || ms[0].Exec() {
		t.Errorf("first mappings %+v %+v", ms[0], ms[1])
	}
	if ms[2].Path != "" || ms[2].File() {
		t.Errorf("anonymous mapping %+v", ms[2])
	}
	if ms[4].Path != "/usr/lib/x86_64-linux-gnu/libcuda.so.1" {
		t.Errorf("deleted suffix kept: %q", ms[4].Path)
	}
	if m := ms.Find(0x7f1000000123); m == nil || m.Inode != 99 {
		t.Errorf("Find in libcudart: %+v", m)
	}
	if m := ms.Find(0x7f1000200000); m != nil {
		t.Errorf("Find past the end: %+v", m)
	}
	cudart := LibraryMatcher("libcudart.so")
	if got := ms.Matching(cudart); len(got) != 1 || !strings.HasSuffix(got[0], "libcudart.so.12.4.127") {
		t.Errorf("Matching libcudart: %v", got)
	}
	if cudart("/x/libcudart_static.a") || cudart("/x/libcudart.sox") || !cudart("/x/libcudart.so") {
		t.Error("LibraryMatcher is too loose or too strict")
	}
	if len(ms.Objects()) != 3 {
		t.Errorf("Objects: %v", ms.Objects())
	}
	if _, err := Parse(strings.NewReader("garbage\n")); err == nil {
		t.Error("garbage parsed")
	}
}

func TestReadSelfAndProvider(t *testing.T) {
	ms, err := Read(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	exe, _ := os.Executable()
	exe, _ = filepath.EvalSymlinks(exe)
	found := false
	for _, o := range ms.Objects() {
		if o == exe {
			found = true
		}
	}
	if !found {
		t.Errorf("own executable %s not among %v", exe, ms.Objects())
	}
	if _, err := Read(1 << 30); err == nil {
		t.Error("a missing process read")
	}
	// A dynamically linked program's libc provides malloc; it does not
	// define it itself.
	cmd := exec.Command("sleep", "5")
	if err := cmd.Start(); err != nil {
		t.Skip(err)
	}
	defer cmd.Process.Kill()
	for i := 0; i < 200; i++ {
		ms, err = Read(cmd.Process.Pid)
		if err == nil && len(ms.Matching(LibraryMatcher("libc.so"))) > 0 {
			break
		}
	}
	p, err := Provider(cmd.Process.Pid, ms, "malloc")
	if err != nil || !strings.Contains(filepath.Base(p), "libc") {
		t.Errorf("Provider(malloc) = %q, %v; want libc", p, err)
	}
	if _, err := Provider(cmd.Process.Pid, ms, "no_such_function_xyz"); err == nil {
		t.Error("Provider found a function nobody defines")
	}
	procs, err := ProcessesMapping(LibraryMatcher("libc.so"))
	if err != nil || len(procs[cmd.Process.Pid]) == 0 {
		t.Errorf("ProcessesMapping(libc) misses sleep (%d): %v", cmd.Process.Pid, err)
	}
}
