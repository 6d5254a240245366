package runtime

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gpubpf/gpubpf/pkg/procmaps"
	"github.com/gpubpf/gpubpf/pkg/runtime/agentproto"
	"github.com/gpubpf/gpubpf/pkg/runtime/fatbin"
)

// lateTargeted decides whether CUPTI comes on before a -p trace reads the
// code of modules loaded before the agent: only for a loaded module of
// that kind with a kernel the session targets.
func TestLateTargeted(t *testing.T) {
	s := &Session{gpu: []GPUProgram{{Kernel: "gemm*"}},
		stats: Stats{KernelsSeen: map[string]bool{}}}
	p := &Process{PID: 1, s: s}
	kernels := []agentproto.Kernel{{ModuleID: 1, Name: "gemm_sm90"}, {ModuleID: 2, Name: "softmax"}, {ModuleID: 3, Name: "gemm_tn"}}
	for _, tc := range []struct {
		name string
		mods []agentproto.Module
		want bool
	}{
		{"a library's module loaded before the agent", []agentproto.Module{{ID: 1}}, true},
		{"before the agent, no targeted kernel", []agentproto.Module{{ID: 2}}, false},
		{"loaded with the agent (its image fetchable)", []agentproto.Module{{ID: 1, Size: 4096}}, false},
		{"loaded from a file with the agent", []agentproto.Module{{ID: 3, Path: "/k.cubin"}}, false},
		{"unloaded", []agentproto.Module{{ID: 1, Unloaded: true}}, false},
		{"one of several", []agentproto.Module{{ID: 2}, {ID: 3, Size: 8}, {ID: 1}}, true},
	} {
		if got := p.lateTargeted(&agentproto.Inventory{Modules: tc.mods, Kernels: kernels}); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// lateReadBytes counts the device code of the files a process maps, less
// the files the session has indexed already.
func TestLateReadBytes(t *testing.T) {
	lib, err := filepath.Abs("fatbin/testdata/libmulti_cuda13.so")
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(lib)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	mem, err := syscall.Mmap(int(f.Fd()), 0, int(st.Size()), syscall.PROT_READ, syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(mem)

	s := &Session{}
	p := &Process{PID: os.Getpid(), s: s}
	want := fatbin.DeviceCodeBytes(lib)
	if got := p.lateReadBytes(); want == 0 || got < want {
		t.Fatalf("mapping %s (%d bytes of device code): %d counted", lib, want, got)
	}
	before := p.lateReadBytes()
	p.mappedFatbins(procmaps.HostPath(p.PID, lib)) // indexed: no longer to be read
	if got := p.lateReadBytes(); got != before-want {
		t.Errorf("after indexing it: %d, want %d", got, before-want)
	}

	// the same code in a file named as the driver's library: left out
	drv := filepath.Join(t.TempDir(), "libcuda.so.1")
	b, err := os.ReadFile(lib)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(drv, b, 0o644); err != nil {
		t.Fatal(err)
	}
	g, err := os.Open(drv)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	mem2, err := syscall.Mmap(int(g.Fd()), 0, len(b), syscall.PROT_READ, syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(mem2)
	if got := p.lateReadBytes(); got != before-want {
		t.Errorf("with %s mapped: %d, want %d (the driver's library left out)", drv, got, before-want)
	}
}

// In a process CUPTI already times for launchlate (KernelTimesWhenNeeded),
// a module loaded before the agent is left unread: its kernels are timed
// through CUPTI. With CUPTI off, or another mode, it would be read.
func TestLateModuleLeftToCUPTI(t *testing.T) {
	var log strings.Builder
	s := &Session{opts: Options{KernelTimes: KernelTimesWhenNeeded, Log: &log}, gpu: []GPUProgram{{Kernel: "*"}},
		stats: Stats{KernelsSeen: map[string]bool{}}}
	p := &Process{PID: 7, s: s, modules: map[uint64]bool{}}
	p.kt.on = true
	inv := &agentproto.Inventory{Modules: []agentproto.Module{{ID: 3}}, Kernels: []agentproto.Kernel{{ModuleID: 3, Name: "gemm"}}}
	p.instrumentModule(inv.Modules[0], inv) // with no connection: reading it would fail and say so
	if !strings.Contains(log.String(), "module 3 (loaded before the agent): timed through CUPTI, its code not read") || !p.modules[3] {
		t.Errorf("log %q, module done %v: want it left to CUPTI", log.String(), p.modules[3])
	}
	if len(s.stats.KernelsSkipped) != 0 || len(s.stats.NotTraced) != 0 {
		t.Errorf("skipped %v, not traced %v: a kernel CUPTI times is neither", s.stats.KernelsSkipped, s.stats.NotTraced)
	}
}

// A module loaded before the agent is mostly learnt at its first launch
// after the attach (the program was idle as the tool came), not in the
// attach's inventory. In a process with much device code to read, CUPTI is
// asked for there too, before the module's code would be read (on the
// H200, 2026-11-28, PyTorch's read outlasted a 6 s trace and CUPTI came on
// after it had ended).
func TestCUPTIBeforeReading(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mode   KernelTimesMode
		slow   bool
		on     bool
		loaded agentproto.Module
		want   bool
	}{
		{"much code, loaded before the agent", KernelTimesWhenNeeded, true, false, agentproto.Module{ID: 3}, true},
		{"CUPTI on already", KernelTimesWhenNeeded, true, true, agentproto.Module{ID: 3}, false},
		{"little code", KernelTimesWhenNeeded, false, false, agentproto.Module{ID: 3}, false},
		{"loaded after the agent", KernelTimesWhenNeeded, true, false, agentproto.Module{ID: 3, Size: 4096}, false},
		{"CUPTI never", KernelTimesOff, true, false, agentproto.Module{ID: 3}, false},
		{"CUPTI from the start", KernelTimesAlways, true, false, agentproto.Module{ID: 3}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &Process{PID: 7, s: &Session{opts: Options{KernelTimes: tc.mode}}}
			p.kt.on = tc.on
			p.lateSlowOnce.Do(func() { p.lateSlow = tc.slow })
			if got := p.cuptiBeforeReading(tc.loaded); got != tc.want {
				t.Errorf("CUPTI before reading: %v, want %v", got, tc.want)
			}
		})
	}
}
