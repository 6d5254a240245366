package runtime

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/gpubpf/gpubpf/internal/testenv"
	"github.com/gpubpf/gpubpf/pkg/runtime/agentproto"
	"github.com/gpubpf/gpubpf/pkg/runtime/gpumap"
)

// hostSpec is an object with a 1512 map "per" (3 entries) and a 1513 map
// "shared" (2 entries) used by one GPU program, and a 1502 map it does not
// size.
func hostSpec() (*ebpf.CollectionSpec, []GPUProgram) {
	spec := specWith(map[string]ebpf.MapType{"per": 1512, "shared": 1513, "dev": 1502},
		prog("p", "kprobe/k", "per", "shared", "dev"))
	spec.Maps["per"].MaxEntries = 3
	spec.Maps["shared"].MaxEntries = 2
	gpu, _, _ := SplitPrograms(spec)
	return spec, gpu
}

// The host-backed maps get the device layouts with HostResident set, and
// per-thread capacity by the 1502 rule with host RAM as the budget.
func TestPlanHostMaps(t *testing.T) {
	spec, gpu := hostSpec()
	plan, err := planHostMaps(spec, gpu, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan) != 2 {
		t.Fatalf("planned %v, want per and shared only", plan)
	}
	per, shared := plan["per"], plan["shared"]
	if per.Kind != gpumap.PerThreadArray || !per.HostResident || per.Threads != gpumap.DefaultThreads || per.MaxEntries != 3 {
		t.Errorf("per: %+v", per)
	}
	if shared.Kind != gpumap.Array || !shared.HostResident || shared.MaxEntries != 2 {
		t.Errorf("shared: %+v", shared)
	}
	if plan, _ := planHostMaps(spec, gpu, 4096); plan["per"].Threads != 4096 {
		t.Errorf("Threads 4096: per gets %d threads", plan["per"].Threads)
	}
	// Too big for the budget by default: halved until all fit, the same
	// capacity in every per-thread map.
	spec.Maps["per"].ValueSize = 1024
	spec.Maps["more"] = &ebpf.MapSpec{Name: "more", Type: 1512, KeySize: 4, ValueSize: 8, MaxEntries: 1}
	gpu = append(gpu, GPUProgram{Spec: prog("q", "kprobe/k", "more")})
	plan, err = planHostMaps(spec, gpu, 0)
	if err != nil {
		t.Fatal(err)
	}
	var sum uint64
	for _, pl := range plan {
		sum += gpumap.SizeOf(pl)
	}
	if n := plan["per"].Threads; n >= gpumap.DefaultThreads || n != plan["more"].Threads || sum > hostMapBudget || sum <= hostMapBudget/2 {
		t.Errorf("1 KiB values x 3 and 8 bytes: %d and %d threads, %d bytes for a %d budget", n, plan["more"].Threads, sum, hostMapBudget)
	}
	// Asked for more than the budget: refused, saying what to do.
	_, err = planHostMaps(spec, gpu, 1<<20)
	for _, want := range []string{"the host-backed maps need 3080 MiB of pinned host memory",
		"more: 1048576 threads x 1 entries of 8 bytes, 8 MiB; per: 1048576 threads x 3 entries of 1024 bytes, 3072 MiB; shared: 2 entries of 8 bytes, 1 MiB",
		"over the 1024 MiB", "--threads", "give the maps fewer entries",
		"keep them in device memory as BPF_MAP_TYPE_PERGPUTD_ARRAY_MAP (1502) and BPF_MAP_TYPE_GPU_ARRAY_MAP (1503)"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("over budget: %v\nwant %q", err, want)
		}
	}
	// Maps no GPU program uses take nothing, whatever their size.
	spec.Maps["shared"].MaxEntries = 200 << 20
	if plan, err := planHostMaps(spec, gpu[:0], 0); err != nil || len(plan) != 0 {
		t.Fatalf("no GPU program: %v, %v", plan, err)
	}
	// Shared arrays alone: nothing about threads.
	only := specWith(map[string]ebpf.MapType{"big": 1513}, prog("p", "kprobe/k", "big"))
	only.Maps["big"].MaxEntries = 200 << 20
	g, _, _ := SplitPrograms(only)
	_, err = planHostMaps(only, g, 0)
	if err == nil || !strings.Contains(err.Error(), "big: 209715200 entries of 8 bytes, 1600 MiB") || strings.Contains(err.Error(), "threads") ||
		!strings.Contains(err.Error(), "as BPF_MAP_TYPE_GPU_ARRAY_MAP (1503)") {
		t.Errorf("shared array over budget: %v", err)
	}
}

// Open refuses a host-backed map that cannot fit before it attaches
// anything, and takes 1512/1513 otherwise.
func TestOpenSizesHostMaps(t *testing.T) {
	spec, _ := hostSpec()
	spec.Maps["per"].ValueSize = 4096
	if _, err := Open(spec, Options{Threads: 1 << 20}); err == nil || !strings.Contains(err.Error(), "the host-backed maps need") {
		t.Fatalf("Open with 4 GiB x 3 of per-thread host memory: %v", err)
	}
	testenv.Root(t) // the verifier twin loads into the kernel
	spec, _ = hostSpec()
	s, err := Open(spec, Options{Threads: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if p := s.hostMaps["per"]; p.Threads != 1000 || !p.HostResident {
		t.Errorf("per placed as %+v", p)
	}
}

// A host-backed map is read from the tool's mapping: the bytes the GPU
// wrote show in ReadMaps through the usual readers, with no agent (this
// process has none), and a map released with its process is skipped, not
// an error.
func TestReadMapsHostBacked(t *testing.T) {
	spec, gpu := hostSpec()
	plan, err := planHostMaps(spec, gpu, 4)
	if err != nil {
		t.Fatal(err)
	}
	s := &Session{spec: spec, procs: map[int]*Process{}, kern: &kernelSide{}, hostMaps: plan}
	target := agentproto.Target{Device: 0}
	d := &device{target: target, maps: map[string]*placedMap{}}
	p := &Process{PID: 4242, s: s, devs: map[agentproto.Target]*device{target: d}}
	d.p = p
	s.procs[p.PID] = p
	for _, name := range []string{"per", "shared"} {
		pl := plan[name]
		f, mem, err := sharedMemory(name, pageRound(gpumap.SizeOf(pl)))
		if err != nil {
			t.Fatal(err)
		}
		copy(mem, gpumap.InitHeader(pl))
		pl.Addr = 0x7f0000000000
		d.maps[name] = &placedMap{name: name, spec: spec.Maps[name], place: pl, file: f, mem: mem, host: true}
	}
	le := binary.LittleEndian
	// What GPU threads would have written: shared[1] = 1234, thread 2's
	// key 0 = 7 and key 2 = 2.
	le.PutUint64(d.maps["shared"].mem[gpumap.HeaderSize+8:], 1234)
	le.PutUint64(d.maps["per"].mem[gpumap.HeaderSize+(2*3+0)*8:], 7)
	le.PutUint64(d.maps["per"].mem[gpumap.HeaderSize+(2*3+2)*8:], 2)

	copies, err := s.ReadMaps()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, mc := range copies {
		if !mc.Place.HostResident {
			t.Errorf("%s: copy not marked host-resident", mc.Name)
		}
		if len(mc.Values()) == 0 {
			t.Errorf("%s (%v): no values", mc.Name, mc.Kind)
		}
		mc.Entries(func(k, v []byte) bool {
			key := fmt.Sprint(le.Uint32(k))
			if len(k) == 8 {
				key = fmt.Sprintf("t%d/%d", le.Uint32(k[4:]), le.Uint32(k))
			}
			got[mc.Name+"["+key+"]"] = fmt.Sprint(le.Uint64(v))
			return true
		})
	}
	want := map[string]string{"shared[0]": "0", "shared[1]": "1234", "per[t2/0]": "7", "per[t2/2]": "2"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("entries %v, want %v", got, want)
	}
	// Live: a later write shows in the next read.
	le.PutUint64(d.maps["shared"].mem[gpumap.HeaderSize:], 5)
	copies, _ = s.ReadMaps("shared")
	if v, _ := gpumap.ArrayValue(copies[0].Data, 8, 0, false); le.Uint64(v) != 5 {
		t.Errorf("second read: shared[0] = %d, want 5", le.Uint64(v))
	}
	// Released (the session detached) while a reader still holds the
	// process: skipped.
	p.close()
	if copies, err := s.ReadMaps(); err != nil || len(copies) != 0 {
		t.Errorf("after release: %d copies, %v", len(copies), err)
	}
}
