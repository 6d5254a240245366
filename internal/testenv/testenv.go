// Package testenv finds the external tools tests need (ptxas, nvcc,
// cuobjdump, clang, gcc) and the privileges they need, the same way in every
// package. A missing tool skips the test on a developer machine but fails it
// under CI (CI=true), so CI never goes green by skipping.
package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
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

// StandIn is the agent's test rig built into one directory: the agent
// library, the stand-in driver (pkg/runtime/agent/testdata/fakecuda.c) as
// CUDADir/libcuda.so.1, and the test application (testdata/app.c), which
// reaches the driver the way cudart does.
type StandIn struct {
	Agent, CUDADir, App string
}

// BuildStandIn builds the rig into dir with gcc (a missing gcc skips the
// test, or fails it under CI); a compiler warning fails the test.
func BuildStandIn(t testing.TB, dir string) StandIn {
	t.Helper()
	gcc := Tool(t, "gcc")
	_, self, _, _ := runtime.Caller(0)
	src := filepath.Join(filepath.Dir(self), "..", "..", "pkg", "runtime", "agent")
	s := StandIn{Agent: filepath.Join(dir, "libgpubpf-agent.so"), CUDADir: filepath.Join(dir, "cuda"), App: filepath.Join(dir, "app")}
	if err := os.MkdirAll(s.CUDADir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, step := range [][]string{
		{"make", "-s", "-C", src, "AGENT_BIN_DIR=" + dir, "CC=" + gcc},
		// -Bsymbolic-functions: like the real driver, cuGetProcAddress hands
		// out the library's own functions, not the agent's interposed exports.
		{gcc, "-O1", "-fPIC", "-shared", "-pthread", "-Wl,-Bsymbolic-functions", "-Wl,-soname,libcuda.so.1", "-o",
			filepath.Join(s.CUDADir, "libcuda.so.1"), filepath.Join(src, "testdata", "fakecuda.c")},
		{gcc, "-o", s.App, filepath.Join(src, "testdata", "app.c"), "-ldl", "-pthread"},
	} {
		out, err := exec.Command(step[0], step[1:]...).CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v\n%s", step, err, out)
		}
		if strings.Contains(string(out), "warning") {
			t.Errorf("%v: compiler warnings:\n%s", step, out)
		}
	}
	return s
}
