package promexport

import (
	"os"
	"path/filepath"
	"testing"

	"go.opentelemetry.io/otel/attribute"
)

// The driver's description of each GPU, in PCI order, becomes gpu.name
// and gpu.uuid; a host without it gives none.
func TestGPUAttributes(t *testing.T) {
	root := t.TempDir()
	for bus, info := range map[string]string{
		"0000:19:00.0": "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 17\nGPU UUID: \t GPU-aaaa\nBus Location: \t 0000:19:00.0\n",
		"0000:3b:00.0": "Model: \t\t NVIDIA H100 80GB HBM3\nGPU UUID: \t GPU-bbbb\n",
	} {
		os.MkdirAll(filepath.Join(root, bus), 0o755)
		os.WriteFile(filepath.Join(root, bus, "information"), []byte(info), 0o644)
	}
	got := gpuAttributes(root)
	want := []attribute.KeyValue{
		attribute.StringSlice("gpu.name", []string{"NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"}),
		attribute.StringSlice("gpu.uuid", []string{"GPU-aaaa", "GPU-bbbb"}),
	}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("got %v, want %v", got, want)
	}
	if a := gpuAttributes(t.TempDir()); a != nil {
		t.Errorf("no driver: %v, want none", a)
	}
}
