package runtime

import (
	"encoding/binary"
	"sync"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/gpubpf/gpubpf/internal/testenv"
	"github.com/gpubpf/gpubpf/pkg/runtime/agentproto"
)

// A fold adds what each word of the device copy gained, modulo the word:
// a counter the GPU wrapped wraps the same in the CPU's copy, a word that
// went down (an add of a negative number) goes down, and words of other
// widths are not mixed up (a carry out of a 32-bit word stays out).
func TestAddDeltas(t *testing.T) {
	ne := binary.NativeEndian
	u64s := func(v ...uint64) []byte {
		b := make([]byte, 8*len(v))
		for i, x := range v {
			ne.PutUint64(b[8*i:], x)
		}
		return b
	}
	u32s := func(v ...uint32) []byte {
		b := make([]byte, 4*len(v))
		for i, x := range v {
			ne.PutUint32(b[4*i:], x)
		}
		return b
	}
	for _, tc := range []struct {
		name                  string
		width                 int
		host, last, cur, want []byte
	}{
		{"grew", 8, u64s(100, 7), u64s(0, 0), u64s(5, 0), u64s(105, 7)},
		{"grew again", 8, u64s(105, 7), u64s(5, 0), u64s(9, 3), u64s(109, 10)},
		{"went down", 8, u64s(109, 10), u64s(9, 3), u64s(4, 3), u64s(104, 10)},
		{"wrapped on the GPU", 8, u64s(1, 0), u64s(^uint64(0)-1, 0), u64s(2, 0), u64s(5, 0)},
		{"32-bit words", 4, u32s(10, 1<<31), u32s(0xffffffff, 0), u32s(1, 1<<31), u32s(12, 0)},
		{"nothing new", 8, u64s(3), u64s(8), u64s(8), u64s(3)},
	} {
		host := append([]byte(nil), tc.host...)
		addDeltas(host, tc.last, tc.cur, tc.width)
		if string(host) != string(tc.want) {
			t.Errorf("%s: host %x, want %x", tc.name, host, tc.want)
		}
	}
}

// A shared map the GPU only adds to, mirrored in the stand-in's device
// memory: adds written there reach the kernel's map at each fold, on top
// of what the CPU added meanwhile (BPF programs' atomics, here the tool's
// own through the map's memory), once each, however often it folds.
func TestFoldMirror(t *testing.T) {
	testenv.Root(t)
	conn, _ := standInApp(t)
	km, err := ebpf.NewMap(&ebpf.MapSpec{Name: "shared", Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 4, Flags: bpfFMmapable})
	if err != nil {
		t.Fatal(err)
	}
	defer km.Close()
	spec := &ebpf.MapSpec{Name: "shared", Type: MapTypeKernelShared, KeySize: 4, ValueSize: 8, MaxEntries: 4}
	s := &Session{procs: map[int]*Process{}, kern: &kernelSide{}, mirrored: map[string]int{"shared": 8}}
	defer s.unmapHostViews()
	target := agentproto.Target{Device: 0}
	d := &device{target: target, maps: map[string]*placedMap{}}
	p := &Process{PID: 4242, s: s, conn: conn, devs: map[agentproto.Target]*device{target: d}}
	d.p = p
	m, err := d.placeMirror("shared", spec, km, 8)
	if err != nil {
		t.Fatal(err)
	}
	d.maps["shared"] = m
	if m.place.HostResident || m.place.Addr != m.devAddr {
		t.Fatalf("the mirror's placement %+v: want device memory at %#x (GPU-scope atomics)", m.place, m.devAddr)
	}
	gpuAdds := make([]uint64, 4) // what the GPU's adds have made of the mirror
	gpuAdd := func(k int, v uint64) {
		t.Helper()
		gpuAdds[k] += v
		if err := conn.Write(target, m.devAddr+uint64(8*k), binary.NativeEndian.AppendUint64(nil, gpuAdds[k])); err != nil {
			t.Fatal(err)
		}
	}
	value := func(k uint32) uint64 {
		t.Helper()
		var v uint64
		if err := km.Lookup(k, &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	cpuAdd := func(k uint32, v uint64) { // a CPU program's atomic add
		view := s.hostViews["shared"]
		addDeltas(view[8*k:8*k+8], make([]byte, 8), binary.NativeEndian.AppendUint64(nil, v), 8)
	}
	km.Put(uint32(1), uint64(1000)) // the CPU's own start
	gpuAdd(1, 5)
	gpuAdd(3, 2)
	p.fold(true)
	p.fold(true) // nothing new: adds nothing
	if value(1) != 1005 || value(3) != 2 || value(0) != 0 {
		t.Fatalf("after a fold: [1] = %d (want 1000 + 5), [3] = %d (want 2), [0] = %d", value(1), value(3), value(0))
	}
	var wg sync.WaitGroup
	for range 4 { // the CPU adds while the GPU's adds are folded in
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				cpuAdd(1, 1)
			}
		}()
	}
	for range 10 {
		gpuAdd(1, 3)
		p.fold(true)
	}
	wg.Wait()
	p.fold(false)
	if got, want := value(1), uint64(1005+4000+30); got != want {
		t.Errorf("[1] = %d, want %d: 1005, the CPU's 4000 and the GPU's 30", got, want)
	}
	if s.folds.Load() == 0 {
		t.Errorf("no fold counted")
	}
	if !s.folding() {
		t.Errorf("folding false with a mirrored map the GPU adds to")
	}
}

// Shared maps get a mirror only where every GPU program only adds to them,
// with one width; never the launch-words map; none with
// GPUBPF_SHARED_MAPS=direct.
func TestMirroredMaps(t *testing.T) {
	add := func(name string, size asm.Size) GPUProgram {
		insns := lookupThen(name, asm.Mov.Imm(asm.R1, 1), asm.AddAtomic.Mem(asm.R0, asm.R1, size, 0))
		return GPUProgram{Spec: &ebpf.ProgramSpec{Name: "add_" + name, Instructions: insns}}
	}
	read := prog("read_b", "kprobe/k", "b") // looks b up and leaves it: add-only too
	load := GPUProgram{Spec: &ebpf.ProgramSpec{Name: "load_c", Instructions: lookupThen("c", asm.LoadMem(asm.R0, asm.R0, 0, asm.DWord))}}
	shared := map[string]bool{"a": true, "b": true, "c": true, "d": true, "w": true}
	gpu := []GPUProgram{add("a", asm.DWord), add("b", asm.DWord), {Spec: read}, load, add("c", asm.DWord),
		add("d", asm.DWord), add("d", asm.Word), add("w", asm.DWord), add("gpu_only", asm.DWord)}
	got, err := mirroredMaps(gpu, shared, "w")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"a": 8, "b": 8}
	if len(got) != len(want) || got["a"] != 8 || got["b"] != 8 {
		t.Errorf("mirrored %v, want %v (c is read, d added at two widths, w the launch words, gpu_only not shared)", got, want)
	}
	if got, _ := mirroredMaps(gpu, nil, ""); got != nil {
		t.Errorf("no map shared with the CPU: mirrored %v", got)
	}
	t.Setenv("GPUBPF_SHARED_MAPS", "direct")
	if got, _ := mirroredMaps(gpu, shared, ""); len(got) != 0 {
		t.Errorf("GPUBPF_SHARED_MAPS=direct: mirrored %v", got)
	}
}

// lookupThen looks key 0 of map name up and, found, runs then with the
// value's pointer in r0; returns 0.
func lookupThen(name string, then ...asm.Instruction) asm.Instructions {
	insns := asm.Instructions{
		asm.StoreImm(asm.RFP, -4, 0, asm.Word),
		asm.LoadMapPtr(asm.R1, 0).WithReference(name),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "out"),
	}
	insns = append(insns, then...)
	return append(insns, asm.Mov.Imm(asm.R0, 0).WithSymbol("out"), asm.Return())
}
