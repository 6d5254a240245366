package examples

import (
	"testing"

	"github.com/cilium/ebpf"
)

// The bundled objects must load as bpftime-style GPU programs: kprobe
// programs whose AttachTo names the CUDA kernel, with their GPU map types
// kept as they are.
func TestObjectsKeepBpftimeConventions(t *testing.T) {
	for _, tc := range []struct {
		name    string
		load    func() (*ebpf.CollectionSpec, error)
		progs   map[string]string // program -> AttachTo
		mapType map[string]ebpf.MapType
	}{
		{"counter", loadCounter,
			map[string]string{"vectorAdd_entry": "_Z9vectorAddPKfS0_Pfi", "vectorAdd_exit": "_Z9vectorAddPKfS0_Pfi"},
			map[string]ebpf.MapType{"calls": 1503}},
		{"trace", loadTrace,
			map[string]string{"cuda__probe": "_Z9vectorAddPKfS0_Pfi"},
			map[string]ebpf.MapType{"events": 1527}},
		{"host_map", loadHostMap,
			map[string]string{"host_map_entry": "_Z9vectorAddPKfS0_Pfi", "host_map_exit": "_Z9vectorAddPKfS0_Pfi"},
			map[string]ebpf.MapType{"thread_start": 1512, "per_thread": 1512, "shared_counter": 1513}},
		{"refused", loadRefused, // loads; the verifier refuses it (make demo)
			map[string]string{"vectorAdd_entry": "_Z9vectorAddPKfS0_Pfi"},
			map[string]ebpf.MapType{"calls": 1503}},
		{"mem_trace", loadMem_trace,
			map[string]string{"mem_trace": "__memcapture"},
			map[string]ebpf.MapType{"accesses": 1501, "sizes": 1501}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec, err := tc.load()
			if err != nil {
				t.Fatal(err)
			}
			for name, attach := range tc.progs {
				p := spec.Programs[name]
				if p == nil {
					t.Fatalf("program %s missing", name)
				}
				if p.Type != ebpf.Kprobe || p.AttachTo != attach {
					t.Errorf("%s: type %v attach %q, want kprobe %q", name, p.Type, p.AttachTo, attach)
				}
			}
			for name, typ := range tc.mapType {
				m := spec.Maps[name]
				if m == nil || m.Type != typ {
					t.Errorf("map %s: %+v, want type %d", name, m, typ)
				}
			}
		})
	}
}

// The direct-run example keeps bpftime's section for its kernels of their
// own (and gpubpf's spelling for one), with every map a GPU array.
func TestDirectRunObject(t *testing.T) {
	spec, err := loadDirectRun()
	if err != nil {
		t.Fatal(err)
	}
	for name, sec := range map[string]string{"vec_add": "kprobe/__directly_run", "gemm": "kprobe/__directly_run", "hello": "gpu/direct"} {
		if p := spec.Programs[name]; p == nil || p.SectionName != sec {
			t.Errorf("program %s: %+v, want section %s", name, p, sec)
		}
	}
	for name, entries := range map[string]uint32{"vec_A": 1 << 20, "vec_B": 1 << 20, "vec_C": 1 << 20, "vec_N": 1,
		"gemm_A": 4096, "gemm_B": 4096, "gemm_C": 4096, "gemm_dims": 1} {
		m := spec.Maps[name]
		if m == nil || m.Type != 1503 || m.MaxEntries != entries {
			t.Errorf("map %s: %+v, want a GPU array (1503) of %d entries", name, m, entries)
		}
	}
	if d := spec.Maps["gemm_dims"]; d != nil && d.ValueSize != 12 {
		t.Errorf("gemm_dims values are %d bytes, want u32[3]", d.ValueSize)
	}
}
