package runtime

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/gpubpf/gpubpf/pkg/runtime/verify"
)

// bpftime's map type numbers (bpf/gpu.h).
const (
	MapTypeGPUHash                  ebpf.MapType = 1501
	MapTypePerThreadArray           ebpf.MapType = 1502
	MapTypeGPUArray                 ebpf.MapType = 1503
	MapTypeKernelShared             ebpf.MapType = 1504
	MapTypeGPURingBuf               ebpf.MapType = 1527
	bpfFMmapable                                 = 1 << 10 // BPF_F_MMAPABLE
	gpuMapTypeFirst, gpuMapTypeLast              = 1501, 1527
)

// isGPUOnlyType reports map types the Linux kernel does not know.
func isGPUOnlyType(t ebpf.MapType) bool {
	return t >= gpuMapTypeFirst && t <= gpuMapTypeLast && t != MapTypeKernelShared
}

// mapUsers records which programs reference each map.
type mapUsers struct {
	gpu, cpu map[string][]string // map name -> program names
}

func usersOf(gpu []GPUProgram, cpu []CPUProgram) mapUsers {
	u := mapUsers{gpu: map[string][]string{}, cpu: map[string][]string{}}
	for _, g := range gpu {
		for _, m := range verify.ReferencedMaps(g.Spec) {
			u.gpu[m] = append(u.gpu[m], g.Spec.Name)
		}
	}
	for _, c := range cpu {
		for _, m := range verify.ReferencedMaps(c.Spec) {
			u.cpu[m] = append(u.cpu[m], c.Spec.Name)
		}
	}
	return u
}

// kernelSide is the part of a collection that lives in the Linux kernel:
// the CPU programs and every map they use, including the arrays they share
// with GPU programs (created BPF_F_MMAPABLE so the agent can map them into
// the application and register them with the driver).
type kernelSide struct {
	coll *ebpf.Collection
	// shared names the kernel maps GPU programs also use.
	shared map[string]bool
}

// kernelSpec returns the sub-collection the Linux kernel loads, with the
// map types translated: bpftime's 1504 becomes an mmapable array, and any
// array used by both sides gets BPF_F_MMAPABLE.
func kernelSpec(spec *ebpf.CollectionSpec, gpu []GPUProgram, cpu []CPUProgram) (*ebpf.CollectionSpec, map[string]bool, error) {
	users := usersOf(gpu, cpu)
	ks := &ebpf.CollectionSpec{
		Maps:      map[string]*ebpf.MapSpec{},
		Programs:  map[string]*ebpf.ProgramSpec{},
		Types:     spec.Types,
		ByteOrder: spec.ByteOrder,
	}
	shared := map[string]bool{}
	for _, name := range sortedKeys(spec.Maps) {
		m := spec.Maps[name]
		onCPU, onGPU := len(users.cpu[name]) > 0, len(users.gpu[name]) > 0
		if m.Type == MapTypeKernelShared {
			onGPU = true // declared for sharing even if only one side uses it now
		}
		if !onCPU && !(m.Type == MapTypeKernelShared) {
			continue // GPU-only (placed by the GPU side) or unused
		}
		if onCPU && isGPUOnlyType(m.Type) {
			return nil, nil, fmt.Errorf("map %s is a GPU-only map (type %d) but CPU program %s uses it: share data between CPU and GPU programs through a BPF_MAP_TYPE_ARRAY or type 1504 map", name, m.Type, users.cpu[name][0])
		}
		c := m.Copy()
		if onGPU {
			switch c.Type {
			case MapTypeKernelShared, ebpf.Array:
				c.Type = ebpf.Array
				c.Flags |= bpfFMmapable
				shared[name] = true
			default:
				return nil, nil, fmt.Errorf("map %s (%s) is used by CPU program %s and GPU program %s: only arrays can be shared with the GPU (the driver maps them as plain memory); make it a BPF_MAP_TYPE_ARRAY", name, c.Type, users.cpu[name][0], users.gpu[name][0])
			}
		}
		ks.Maps[name] = c
	}
	for _, c := range cpu {
		ks.Programs[c.Spec.Name] = c.Spec.Copy()
	}
	return ks, shared, nil
}

// loadKernelSide loads the kernel part of a collection. A collection with
// no CPU programs and no shared maps loads nothing and needs no privileges.
func loadKernelSide(spec *ebpf.CollectionSpec, gpu []GPUProgram, cpu []CPUProgram) (*kernelSide, error) {
	ks, shared, err := kernelSpec(spec, gpu, cpu)
	if err != nil {
		return nil, err
	}
	if len(ks.Maps) == 0 && len(ks.Programs) == 0 {
		return &kernelSide{shared: shared}, nil
	}
	coll, err := ebpf.NewCollection(ks)
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("the kernel's verifier refused a CPU program: %+v", ve)
		}
		return nil, fmt.Errorf("loading the CPU programs and maps into the kernel: %w", err)
	}
	return &kernelSide{coll: coll, shared: shared}, nil
}

func (k *kernelSide) Close() {
	if k != nil && k.coll != nil {
		k.coll.Close()
	}
}
