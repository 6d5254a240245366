package runtime

import (
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/gpubpf/gpubpf/internal/testenv"
)

// prog returns a program that looks up key 0 in each named map.
func prog(name, section string, maps ...string) *ebpf.ProgramSpec {
	var insns asm.Instructions
	for _, m := range maps {
		insns = append(insns,
			asm.StoreImm(asm.RFP, -4, 0, asm.Word),
			asm.LoadMapPtr(asm.R1, 0).WithReference(m),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, -4),
			asm.FnMapLookupElem.Call(),
		)
	}
	insns = append(insns, asm.Mov.Imm(asm.R0, 0), asm.Return())
	return &ebpf.ProgramSpec{Name: name, SectionName: section, Type: ebpf.Kprobe, Instructions: insns, License: "GPL"}
}

func specWith(maps map[string]ebpf.MapType, progs ...*ebpf.ProgramSpec) *ebpf.CollectionSpec {
	s := &ebpf.CollectionSpec{Maps: map[string]*ebpf.MapSpec{}, Programs: map[string]*ebpf.ProgramSpec{}}
	for n, t := range maps {
		s.Maps[n] = &ebpf.MapSpec{Name: n, Type: t, KeySize: 4, ValueSize: 8, MaxEntries: 4}
	}
	for _, p := range progs {
		s.Programs[p.Name] = p
	}
	return s
}

func TestKernelSpecPlacesMaps(t *testing.T) {
	spec := specWith(map[string]ebpf.MapType{
		"gpu_only":  MapTypeGPUArray,
		"shared":    ebpf.Array,
		"declared":  MapTypeKernelShared,
		"cpu_only":  ebpf.Hash,
		"unused":    ebpf.Hash,
		"gpu_array": ebpf.Array,
	},
		prog("g", "kprobe/vectorAdd", "gpu_only", "shared", "gpu_array"),
		prog("c", "uprobe/./app:cudaLaunchKernel", "shared", "cpu_only"),
	)
	gpu, cpu, err := SplitPrograms(spec)
	if err != nil {
		t.Fatal(err)
	}
	ks, shared, err := kernelSpec(spec, gpu, cpu)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{"shared": true, "declared": true, "cpu_only": true} {
		m, ok := ks.Maps[name]
		if !ok {
			t.Errorf("map %s not loaded into the kernel", name)
			continue
		}
		if shared[name] != (want && name != "cpu_only") {
			t.Errorf("map %s shared=%v", name, shared[name])
		}
		if shared[name] && (m.Type != ebpf.Array || m.Flags&bpfFMmapable == 0) {
			t.Errorf("shared map %s: type %v flags %#x, want mmapable array", name, m.Type, m.Flags)
		}
	}
	for _, name := range []string{"gpu_only", "unused", "gpu_array"} {
		if _, ok := ks.Maps[name]; ok {
			t.Errorf("map %s should stay off the kernel", name)
		}
	}
	if _, ok := ks.Programs["g"]; ok || ks.Programs["c"] == nil {
		t.Errorf("kernel programs: %v", ks.Programs)
	}
}

func TestKernelSpecRefusesUnshareable(t *testing.T) {
	for name, tc := range map[string]struct {
		typ  ebpf.MapType
		want string
	}{
		"gpu map used by cpu": {MapTypeGPURingBuf, "GPU-only map"},
		"hash shared":         {ebpf.Hash, "only arrays can be shared"},
	} {
		spec := specWith(map[string]ebpf.MapType{"m": tc.typ}, prog("g", "kprobe/k", "m"), prog("c", "uprobe/x:y", "m"))
		gpu, cpu, _ := SplitPrograms(spec)
		if _, _, err := kernelSpec(spec, gpu, cpu); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", name, err, tc.want)
		}
	}
}

// The translated spec must really load into the Linux kernel, and the shared
// array must be mmapable (what the agent does with its fd).
func TestLoadKernelSideReal(t *testing.T) {
	testenv.Root(t)
	spec := specWith(map[string]ebpf.MapType{"shared": MapTypeKernelShared, "gpu_only": MapTypeGPUHash},
		prog("g", "kprobe/vectorAdd", "shared", "gpu_only"),
		prog("c", "uprobe//bin/true:main", "shared"),
	)
	gpu, cpu, err := SplitPrograms(spec)
	if err != nil {
		t.Fatal(err)
	}
	k, err := loadKernelSide(spec, gpu, cpu)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	m := k.coll.Maps["shared"]
	if m == nil || !k.shared["shared"] {
		t.Fatalf("shared map not loaded: %v", k.coll.Maps)
	}
	mem, err := m.Memory()
	if err != nil {
		t.Fatalf("shared map is not mmapable: %v", err)
	}
	if mem.Size() < 4*8 {
		t.Fatalf("mapped %d bytes", mem.Size())
	}
	if k.coll.Programs["c"] == nil {
		t.Fatal("CPU program not loaded")
	}
}

// A GPU program using a map the GPU cannot hold is refused by Open, with the
// map, its type and what to use instead, before anything is loaded or
// attached (it used to surface only as skipped kernels at attach time).
func TestOpenRefusesUnplaceableGPUMaps(t *testing.T) {
	for typ, want := range map[ebpf.MapType]string{
		ebpf.LRUHash:     `GPU program p (section "kprobe/k"): map m is an LRU hash (type 9), which the GPU cannot hold: use BPF_MAP_TYPE_HASH`,
		ebpf.PerCPUArray: `GPU program p (section "kprobe/k"): map m is a per-CPU array (type 6), which the GPU cannot hold: use BPF_MAP_TYPE_ARRAY`,
		ebpf.PerCPUHash:  `map m is a per-CPU hash (type 5), which the GPU cannot hold: use BPF_MAP_TYPE_HASH`,
	} {
		_, err := Open(specWith(map[string]ebpf.MapType{"m": typ}, prog("p", "kprobe/k", "m")), Options{})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("type %d: %v\nwant %q", typ, err, want)
		}
	}
}
