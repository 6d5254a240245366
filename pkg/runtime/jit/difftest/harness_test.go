package difftest

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// harness drives the CUDA harness (harness.cu) over a pipe.
type harness struct {
	cmd  *exec.Cmd
	in   *bufio.Writer
	out  *bufio.Scanner
	addr uint64
	size uint64
	dir  string
	runs int
}

// startHarness starts $GPUBPF_DIFFTEST_HARNESS, or returns nil when unset
// (CPU-only machines).
func startHarness(t *testing.T, bytes uint64) *harness {
	t.Helper()
	bin := os.Getenv("GPUBPF_DIFFTEST_HARNESS")
	if bin == "" {
		return nil
	}
	cmd := exec.Command(bin, fmt.Sprint(bytes))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the GPU harness %s: %v", bin, err)
	}
	h := &harness{cmd: cmd, in: bufio.NewWriter(stdin), out: bufio.NewScanner(stdout), dir: t.TempDir()}
	h.out.Buffer(make([]byte, 1<<20), 1<<20)
	if !h.out.Scan() {
		t.Fatalf("GPU harness exited before reporting its buffer")
	}
	if _, err := fmt.Sscanf(h.out.Text(), "ADDR 0x%x %d", &h.addr, &h.size); err != nil {
		t.Fatalf("GPU harness said %q: %v", h.out.Text(), err)
	}
	t.Cleanup(func() { stdin.Close(); cmd.Wait() })
	return h
}

// run loads module, copies img to the buffer, launches e_0..e_{n-1} and
// returns the buffer afterwards plus the harness's timing line.
func (h *harness) run(module string, img []byte, n, grid, block int) ([]byte, string, error) {
	return h.runDims(module, img, n, fmt.Sprint(grid), fmt.Sprint(block))
}

// runDims is run with the grid and block as X or XxYxZ.
func (h *harness) runDims(module string, img []byte, n int, grid, block string) ([]byte, string, error) {
	h.runs++
	p := filepath.Join(h.dir, fmt.Sprintf("m%d.ptx", h.runs))
	ip := filepath.Join(h.dir, fmt.Sprintf("m%d.img", h.runs))
	op := filepath.Join(h.dir, fmt.Sprintf("m%d.out", h.runs))
	if err := os.WriteFile(p, []byte(module), 0o644); err != nil {
		return nil, "", err
	}
	if err := os.WriteFile(ip, img, 0o644); err != nil {
		return nil, "", err
	}
	fmt.Fprintf(h.in, "RUN %s %s %s %d %s %s\n", p, ip, op, n, grid, block)
	if err := h.in.Flush(); err != nil {
		return nil, "", fmt.Errorf("GPU harness died: %w", err)
	}
	if !h.out.Scan() {
		return nil, "", fmt.Errorf("GPU harness exited (see its stderr)")
	}
	line := h.out.Text()
	if !strings.HasPrefix(line, "OK") {
		if dump := os.Getenv("GPUBPF_DIFFTEST_DUMP"); dump != "" {
			os.WriteFile(filepath.Join(dump, fmt.Sprintf("failed%d.ptx", h.runs)), []byte(module), 0o644)
		}
		return nil, line, fmt.Errorf("GPU harness: %s", line)
	}
	out, err := os.ReadFile(op)
	return out, line, err
}
