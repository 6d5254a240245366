// Package testenv finds the external tools tests need (ptxas, nvcc,
// cuobjdump, clang, gcc) and the privileges they need, the same way in every
// package. A missing tool skips the test on a developer machine but fails it
// under CI (CI=true), so CI never goes green by skipping.
package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// CUDABinDirs are searched, in order, after $GPUBPF_CUDA_BIN and before $PATH.
// .ci/run unpacks Debian's nvidia-cuda-toolkit into /opt/cudadeb/root.
var CUDABinDirs = []string{"/opt/cudadeb/root/usr/bin", "/usr/local/cuda/bin"}

// InCI reports whether the tests run under .ci/run.
func InCI() bool { return os.Getenv("CI") == "true" }

// Lookup returns the path of a tool or "" if it is nowhere to be found.
func Lookup(name string) string {
	dirs := CUDABinDirs
	if d := os.Getenv("GPUBPF_CUDA_BIN"); d != "" {
		dirs = append([]string{d}, dirs...)
	}
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	return ""
}

// Tool returns the path of a tool the test needs, skipping (or failing under CI).
func Tool(t testing.TB, name string) string {
	t.Helper()
	p := Lookup(name)
	if p == "" {
		missing(t, name+" not found (set GPUBPF_CUDA_BIN or run .ci/run's install step)")
	}
	return p
}

// Ptxas returns the path of ptxas.
func Ptxas(t testing.TB) string { return Tool(t, "ptxas") }

// Root skips (or fails under CI) unless the test runs as root.
func Root(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		missing(t, "needs root for kernel eBPF")
	}
}

// GPU skips unless a CUDA driver is present (never fails: CI has no GPU).
func GPU(t testing.TB) {
	t.Helper()
	for _, p := range []string{"/dev/nvidiactl", "/dev/nvidia0"} {
		if _, err := os.Stat(p); err != nil {
			t.Skip("no NVIDIA GPU on this machine; run make test-gpu on the GPU machine")
		}
	}
}

func missing(t testing.TB, why string) {
	t.Helper()
	if InCI() {
		t.Fatal(why)
	}
	t.Skip(why)
}
