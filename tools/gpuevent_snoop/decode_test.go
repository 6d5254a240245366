package gpuevent_snoop

import (
	"encoding/binary"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/gpubpf/gpubpf/pkg/toolkit"
)

func apiIndex(t testing.TB, name string) int {
	for i := range apis {
		if apis[i].Name == name {
			return i
		}
	}
	t.Fatalf("no API %s", name)
	return -1
}

// rawEvent builds a ring-buffer record as the BPF program lays it out.
func rawEvent(api int, ret int32, regs [6]uint64, stk [6]uint64, out uint64) []byte {
	b := make([]byte, eventSize)
	le := binary.LittleEndian
	le.PutUint64(b[offTs:], 5_000_000_000)
	le.PutUint64(b[offDur:], 2500)
	le.PutUint32(b[offPid:], 4242)
	le.PutUint32(b[offTid:], 4243)
	le.PutUint32(b[offCookie:], uint32(cookie(api)))
	le.PutUint32(b[offRet:], uint32(ret))
	for i, r := range regs {
		le.PutUint64(b[offRegs+8*i:], r)
	}
	for i, s := range stk {
		le.PutUint64(b[offStk+8*i:], s)
	}
	le.PutUint64(b[offOut:], out)
	copy(b[offComm:], "trainer")
	return b
}

func TestDecodeLaunchDim3InRegisters(t *testing.T) {
	// cudaLaunchKernel(func, dim3{7,8,9}, dim3{32,4,2}, args, 4096, stream):
	// each dim3 in two registers, sharedMem and stream on the stack.
	regs := [6]uint64{0x401000, 7 | 8<<32, 9, 32 | 4<<32, 2, 0x7ffd0000}
	stk := [6]uint64{0x401234, 4096, 0xabc}
	var e Event
	if err := Decode(rawEvent(apiIndex(t, "cudaLaunchKernel"), 0, regs, stk, 0), &e); err != nil {
		t.Fatal(err)
	}
	if e.Grid != [3]uint32{7, 8, 9} || e.Block != [3]uint32{32, 4, 2} || e.Shmem != 4096 || e.Stream != 0xabc || e.Func != 0x401000 {
		t.Errorf("decoded %+v", e)
	}
	if string(e.Comm()) != "trainer" || e.PID != 4242 || e.TID != 4243 || e.Caller != 0x401234 {
		t.Errorf("header %+v", e)
	}
}

func TestDecodeDriverLaunchStackArgs(t *testing.T) {
	// cuLaunchKernel(f, gx, gy, gz, bx, by | bz, shmem, stream, params, extra).
	regs := [6]uint64{0xf00, 1, 2, 3, 32, 4}
	stk := [6]uint64{0x401234, 1, 64, 0x55, 0x7ffd0000, 0}
	var e Event
	if err := Decode(rawEvent(apiIndex(t, "cuLaunchKernel"), 0, regs, stk, 0), &e); err != nil {
		t.Fatal(err)
	}
	if e.Grid != [3]uint32{1, 2, 3} || e.Block != [3]uint32{32, 4, 1} || e.Shmem != 64 || e.Stream != 0x55 {
		t.Errorf("decoded %+v", e)
	}
}

func TestDecodeMemcpyAndErrors(t *testing.T) {
	var e Event
	if err := Decode(rawEvent(apiIndex(t, "cudaMemcpyAsync"), 0, [6]uint64{1, 2, 1 << 20, DirD2H, 0x77}, [6]uint64{}, 0), &e); err != nil {
		t.Fatal(err)
	}
	if e.Size != 1<<20 || dirName(e.Dir) != "D2H" || e.Stream != 0x77 || !e.API.Async {
		t.Errorf("decoded %+v", e)
	}
	if err := Decode(rawEvent(apiIndex(t, "cuMemcpyHtoD_v2"), 0, [6]uint64{1, 2, 99}, [6]uint64{}, 0), &e); err != nil {
		t.Fatal(err)
	}
	if dirName(e.Dir) != "H2D" || e.Size != 99 || e.API.Async {
		t.Errorf("decoded %+v", e)
	}
	if got := errorName(false, 2); got != "cudaErrorMemoryAllocation" {
		t.Errorf("cudaError 2 = %s", got)
	}
	if got := errorName(true, 2); got != "CUDA_ERROR_OUT_OF_MEMORY" {
		t.Errorf("CUresult 2 = %s", got)
	}
	if got := errorName(true, 12345); got != "CUresult(12345)" {
		t.Errorf("unknown CUresult = %s", got)
	}
	if err := Decode(make([]byte, 10), &e); err == nil {
		t.Error("a short record decoded")
	}
}

func TestKindListAndSizes(t *testing.T) {
	m, err := kindList("malloc,launch")
	if err != nil || m != 1<<KindMalloc|1<<KindLaunch {
		t.Errorf("kindList: %b %v", m, err)
	}
	if _, err := kindList("bogus"); err == nil {
		t.Error("bogus kind accepted")
	}
	for in, want := range map[string]uint64{"4096": 4096, "4K": 4096, "1M": 1 << 20, "2G": 2 << 30, "1MiB": 1 << 20} {
		if in == "1MiB" {
			continue // only K/M/G suffixes are documented
		}
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v", in, got, err)
		}
	}
}

func TestMatchKernel(t *testing.T) {
	k := &Kernel{Mangled: "_ZN2ns4gemmIfEEvPT_", Demangled: "void ns::gemm<float>(float*)", Short: "ns::gemm<float>"}
	for _, p := range []string{"_ZN2ns4gemmIfEEvPT_", "ns::gemm<float>", "gemm", "ns::*", "*gemm*"} {
		if !matchKernel(k, []string{p}) {
			t.Errorf("%q does not match %v", p, k)
		}
	}
	if matchKernel(k, []string{"gem"}) || matchKernel(k, []string{"vecAdd"}) {
		t.Error("unrelated pattern matched")
	}
}

func TestJSONString(t *testing.T) {
	got := string(toolkit.AppendJSONString(nil, "a\"b\\c\n\x01é"))
	if got != `"a\"b\\c\n\u0001é"` {
		t.Errorf("got %s", got)
	}
}

// BenchmarkDecodePrint measures decoding ring-buffer records and printing
// the live stream, the tool's per-event user-space cost (goal: >= 1M events/s
// on one core). The mix is a training loop's: launches, async copies,
// allocations and frees.
func BenchmarkDecodePrint(b *testing.B) {
	for _, mode := range []string{"text", "json"} {
		b.Run(mode, func(b *testing.B) {
			recs := [][]byte{
				rawEvent(apiIndex(b, "cudaLaunchKernel"), 0, [6]uint64{0x401000, 7 | 1<<32, 1, 256 | 1<<32, 1, 0}, [6]uint64{0x401234, 0, 0x77}, 0),
				rawEvent(apiIndex(b, "cudaLaunchKernel"), 0, [6]uint64{0x402000, 64 | 1<<32, 1, 128 | 1<<32, 1, 0}, [6]uint64{0x401234, 0, 0x77}, 0),
				rawEvent(apiIndex(b, "cudaMemcpyAsync"), 0, [6]uint64{0x7f0000000000, 0x1000, 1 << 20, DirH2D, 0x77}, [6]uint64{0x401300}, 0),
				rawEvent(apiIndex(b, "cudaMalloc"), 0, [6]uint64{0x7ffd0000, 1 << 20}, [6]uint64{0x401400}, 0x7f0000100000),
				rawEvent(apiIndex(b, "cudaFree"), 0, [6]uint64{0x7f0000100000}, [6]uint64{0x401500}, 0),
				rawEvent(apiIndex(b, "cudaMemcpy"), 0, [6]uint64{0x1000, 0x7f0000000000, 4096, DirD2H}, [6]uint64{0x401600}, 0),
			}
			tr := NewTracer(io.Discard, NewResolver(), Options{JSON: mode == "json"}, 0, 0)
			var e Event
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := Decode(recs[i%len(recs)], &e); err != nil {
					b.Fatal(err)
				}
				tr.Handle(&e)
			}
			tr.Flush()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

func TestTracerSummaryAndLeaks(t *testing.T) {
	var sb strings.Builder
	tr := NewTracer(&sb, NewResolver(), Options{Summary: true}, 0, 0)
	var e Event
	for _, r := range [][]byte{
		rawEvent(apiIndex(t, "cudaMalloc"), 0, [6]uint64{0x7ffd0000, 1 << 20}, [6]uint64{0x401400}, 0x7f0000100000),
		rawEvent(apiIndex(t, "cudaMalloc"), 0, [6]uint64{0x7ffd0000, 300}, [6]uint64{0x401400}, 0x7f0000200000),
		rawEvent(apiIndex(t, "cudaFree"), 0, [6]uint64{0x7f0000100000}, [6]uint64{0x401500}, 0),
		rawEvent(apiIndex(t, "cudaFree"), 400, [6]uint64{0xdead}, [6]uint64{0x401500}, 0),
	} {
		if err := Decode(r, &e); err != nil {
			t.Fatal(err)
		}
		tr.Handle(&e)
	}
	leaks := tr.Leaks()
	if len(leaks) != 1 || leaks[0].Bytes != 300 || leaks[0].Allocs != 1 {
		t.Fatalf("leaks %+v, want the 300-byte allocation", leaks)
	}
	tr.PrintSummary(false, time.Time{})
	tr.PrintLeaks()
	out := sb.String()
	for _, want := range []string{"cudaMalloc", "1.00 MiB", "cudaFree", "Leaks: 1 device allocations (300 B)"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
}

func TestCudartInternal(t *testing.T) {
	for site, want := range map[string]bool{
		"cudart::contextState::init+0x40 (app)": true,
		"libcudart.so.13+0x1234":                true,
		"foo+0x10 (libcudart.so.12.4.127)":      true,
		"cudaStreamCreate+0x2c (app)":           true,
		"__cudaRegisterFatBinary+0x8 (app)":     true,
		// nvcc 13's static cudart, seen on the H100 (2026-11-23)
		"libcudart_static_78019a73266967b90b6470f9a1bff466b5365149+0x84 (launch_heavy)": true,
		"main+0x93 (app)":                            false,
		"cudaify+0x3 (app)":                          false,
		"at::native::launch+0x10 (libtorch_cuda.so)": false,
	} {
		if got := isCudartInternal(site); got != want {
			t.Errorf("isCudartInternal(%q) = %v", site, got)
		}
	}
}

func TestDecodeLookup(t *testing.T) {
	b := make([]byte, nameEventSize)
	le := binary.LittleEndian
	le.PutUint32(b[0:], 77)
	le.PutUint32(b[4:], uint32(cookie(apiIndex(t, "cuLibraryGetKernel"))))
	le.PutUint64(b[offNameHandle:], 0x5555deadbeef)
	le.PutUint64(b[offNameAux:], 0x10)
	le.PutUint64(b[offNameCaller:], 0x401234)
	copy(b[offName:], "_Z5scalePfi\x00junk")
	if !IsLookup(b) || IsLookup(make([]byte, eventSize)) {
		t.Fatal("IsLookup does not tell the records apart by size")
	}
	var l Lookup
	if err := DecodeLookup(b, &l); err != nil {
		t.Fatal(err)
	}
	if l.PID != 77 || l.API.Name != "cuLibraryGetKernel" || l.Handle != 0x5555deadbeef || l.Parent != 0x10 || l.Name != "_Z5scalePfi" || l.Caller != 0x401234 {
		t.Errorf("decoded %+v", l)
	}
	le.PutUint32(b[4:], uint32(cookie(apiIndex(t, "cudaMalloc"))))
	if err := DecodeLookup(b, &l); err == nil {
		t.Error("a record naming a non-lookup API was accepted")
	}
}

// The ring buffer's records are bytes from the kernel: no input may make
// the decoders panic.
func FuzzDecodeRecord(f *testing.F) {
	f.Add(rawEvent(apiIndex(f, "cudaLaunchKernel"), 0, [6]uint64{1, 2, 3, 4, 5, 6}, [6]uint64{7, 8, 9}, 0))
	f.Add(make([]byte, nameEventSize))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		if IsLookup(b) {
			var l Lookup
			DecodeLookup(b, &l)
			return
		}
		var e Event
		if Decode(b, &e) == nil {
			_ = e.Args()
			_ = e.Stack()
			_ = e.Comm()
		}
	})
}

func TestCostHint(t *testing.T) {
	for _, tc := range []struct {
		c        costFacts
		wantHint string
	}{
		{costFacts{launches: 200000, secs: 1, hitsPerLaunch: 2, mode: modeSession, driverWhy: "app imports cuLaunchKernel"}, "app imports cuLaunchKernel"},
		{costFacts{launches: 200000, secs: 1, hitsPerLaunch: 2, mode: modeMulti}, "--launch-entry"},
		{costFacts{launches: 200000, secs: 1, hitsPerLaunch: 1, mode: modeSession, stepped: []string{"cudaLaunchKernel"}}, "single-steps"},
		{costFacts{launches: 200000, secs: 1, hitsPerLaunch: 1, mode: modeSession}, ""}, // nothing to say
		{costFacts{launches: 200000, secs: 1, hitsPerLaunch: 1, mode: modeMulti, launchEntry: true}, ""},
		{costFacts{launches: 5000, secs: 0.01, hitsPerLaunch: 2, mode: modeMulti}, ""}, // too few to matter
		{costFacts{launches: 100000, secs: 60, hitsPerLaunch: 2, mode: modeMulti}, ""}, // slow rate
	} {
		h := costHint(tc.c)
		if (h == "") != (tc.wantHint == "") || !strings.Contains(h, tc.wantHint) {
			t.Errorf("costHint(%+v) = %q, want one with %q", tc.c, h, tc.wantHint)
		}
	}
}
