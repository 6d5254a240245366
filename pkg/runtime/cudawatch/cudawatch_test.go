package cudawatch

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpubpf/gpubpf/internal/testenv"
)

// A process that initialises CUDA (the stand-in driver's cuInit, reached
// the way cudart reaches it: through cuGetProcAddress) is reported once,
// by its pid; while it runs it is also among those Running lists.
func TestWatch(t *testing.T) {
	testenv.Root(t)
	dir := t.TempDir()
	rig := testenv.BuildStandIn(t, dir)
	lib := filepath.Join(rig.CUDADir, "libcuda.so.1")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	found := make(chan int, 16)
	w, err := Start(ctx, []string{lib}, func(pid int) { found <- pid })
	if err != nil {
		t.Fatal(err)
	}
	app := exec.Command(rig.App)
	app.Env = append(os.Environ(), "LD_LIBRARY_PATH="+rig.CUDADir)
	app.Stdin = strings.NewReader("") // it initialises CUDA, then ends at EOF
	if out, err := app.CombinedOutput(); err != nil && !strings.Contains(string(out), "READY") {
		t.Fatalf("app: %v\n%s", err, out)
	}
	select {
	case pid := <-found:
		if pid != app.Process.Pid {
			t.Errorf("found pid %d, want the app's %d", pid, app.Process.Pid)
		}
	case <-time.After(time.Minute): // a hang detector
		t.Fatal("the app's cuInit was not seen")
	}

	// Running: a CUDA process alive now.
	live := exec.Command(rig.App)
	live.Env = append(os.Environ(), "LD_LIBRARY_PATH="+rig.CUDADir)
	in, _ := live.StdinPipe()
	out, _ := live.StdoutPipe()
	if err := live.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { in.Close(); live.Wait() }()
	buf := make([]byte, 256)
	out.Read(buf) // READY: libcuda is mapped
	if !slices.Contains(Running(), live.Process.Pid) {
		t.Errorf("Running() = %v lacks the live app %d", Running(), live.Process.Pid)
	}
	if libs := Libraries(); len(libs) == 0 {
		t.Errorf("Libraries() found none, with the app mapping %s", lib)
	}
	cancel()
	if err := <-w.Done(); err != nil {
		t.Errorf("the watch ended with %v", err)
	}
}
