package promexport

import (
	"bufio"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"go.opentelemetry.io/otel/attribute"
)

// nvidiaProc is where the NVIDIA kernel driver describes each GPU of the
// host (one directory per PCI address), without a CUDA call.
const nvidiaProc = "/proc/driver/nvidia/gpus"

// GPUAttributes describes the host's NVIDIA GPUs for an OTLP resource:
// gpu.name and gpu.uuid, one entry per GPU in PCI order (the ordinals
// CUDA gives by default). None where the driver says nothing (no GPU, a
// container without /proc/driver/nvidia).
func GPUAttributes() []attribute.KeyValue { return gpuAttributes(nvidiaProc) }

func gpuAttributes(root string) []attribute.KeyValue {
	dirs, _ := filepath.Glob(filepath.Join(root, "*", "information"))
	slices.Sort(dirs)
	var names, uuids []string
	for _, path := range dirs {
		f, err := os.Open(path)
		if err != nil {
			continue
		}
		var name, uuid string
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			k, v, ok := strings.Cut(sc.Text(), ":")
			if !ok {
				continue
			}
			switch strings.TrimSpace(k) {
			case "Model":
				name = strings.TrimSpace(v)
			case "GPU UUID":
				uuid = strings.TrimSpace(v)
			}
		}
		f.Close()
		if name != "" || uuid != "" {
			names = append(names, name)
			uuids = append(uuids, uuid)
		}
	}
	if len(names) == 0 {
		return nil
	}
	return []attribute.KeyValue{attribute.StringSlice("gpu.name", names), attribute.StringSlice("gpu.uuid", uuids)}
}
