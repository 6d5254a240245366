package agentproto

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

var allOps = []Op{OpHello, OpList, OpFetch, OpGlobals, OpLoad, OpUnload, OpAlloc, OpFree, OpMemset,
	OpWrite, OpRead, OpRegisterHost, OpUnregisterHost, OpSnapshot, OpActivate, OpDeactivate, OpDetach,
	OpStats, OpContinue, OpReleaseUnload, OpDeviceReady, OpRingDrain, OpClock, OpLaunch, OpLaunchEvents, OpKernelTimes, OpGraphs, OpGraphStamps, OpSanitize}

func TestRoundTrip(t *testing.T) {
	msgs := []Message{
		&HelloRequest{Version: Version, Flags: FlagHold, Client: "test"},
		&Hello{Version: 1, PID: 42, UID: 0, Exe: "/bin/x", AgentVersion: "0.1.0", DriverVersion: 13000,
			PTXISAMax: 90, CUDAReady: true, Devices: []Device{{0, "H200", 9, 0}, {1, "H200", 9, 0}}, DevicesUsed: 2},
		&Hello{Version: Version, PID: 7, Direct: true, CUDAError: "cannot load libcuda.so.1", Devices: []Device{}},
		&Device{Ordinal: 1, Name: "H200", Major: 9, Minor: 0},
		&DeviceRequest{Ordinal: 1},
		&Inventory{Modules: []Module{{ID: 1, Kind: LibraryData, Handle: 7, Format: FormatFatbin, Size: 99, Path: "", Device: -1},
			{ID: 2, Kind: ModuleData, Handle: 8, Ctx: 5, Format: FormatPTX, Size: 10, Device: 1, Primary: true}},
			Kernels: []Kernel{{Handle: 9, Kind: KindKernel, ModuleID: 1, Name: "_Z3fooPi"}}},
		&LateTables{Count: 88, Object: "/usr/lib/libplugin.so"},
		&FetchReply{Total: 10, Data: []byte("abc")},
		&GlobalsRequest{ModuleID: 1, Target: Target{Device: 1}, Names: []string{"d_N", "x"}},
		&GlobalsReply{Globals: []Global{{Name: "d_N", Addr: 0x7000, Size: 4}}},
		&LoadRequest{Target: Target{Ctx: 5}, PTX: []byte(".version 9.0"), Functions: []string{"f"}},
		&LoadReply{CloneID: 3, Ctx: 5, LoadNanos: 123, InfoLog: "ok", Functions: []Function{{"f", 77}}},
		&RegisterHostRequest{Target: Target{Device: 0}, Kind: HostMemfd, Size: 4096},
		&SnapshotRequest{Src: 1, RegionID: 2, RegionOffset: 3, Size: 4, Flags: SnapshotLive},
		&LaunchEventsRequest{Size: 4096 + 96*1024},
		&LaunchEventsReply{AttachNs: 1 << 50},
		&RingDrainRequest{Target: Target{Device: 1, Ctx: 9}, Ring: 0x7000, RegionID: 2, DataBytes: 1 << 20,
			TailBytes: 4096, Release: []uint64{200, 0, 1 << 40, 7}, Flags: RingDrainHostData},
		&RingDrainRequest{Ring: 0x7000, RegionID: 2, DataBytes: 1 << 20, TailBytes: 4096,
			Release: []uint64{200, 0}, CopyFrom: []uint64{300, 8}},
		&RingDrainReply{Copied: 1 << 40},
		&ActivateRequest{Kernel: 1, CloneID: 2, Function: 3},
		&ActivateRequest{Kernel: 1, CloneID: 2, Function: 3, LaunchWords: LaunchWords{Hidden: LaunchHiddenWords,
			Params: 4, BufOffset: 24, Region: 7, Offset: 4096, Slots: 256}},
		&ClockRequest{Target: Target{Device: 1, Ctx: 9}, Rounds: 16},
		&ClockReply{Offset: -139_000, Bound: 750, At: 1 << 50},
		&ClockReply{Offset: 1<<62 + 5, Bound: 1, At: 2},
		&Stats{Probes: []ProbeStat{{Kernel: 1, CloneID: 2, Launches: 5, Disabled: true}}},
		&ProbeFailed{Kernel: 1, CUResult: 701},
		&Graphs{Execs: []GraphExec{{Exec: 0, KernelNodes: GraphNodesUnknown},
			{Exec: 0x55aa, Launches: 3000, LaunchesInstrumented: 2990, LaunchesKernelTimes: 7, KernelRuns: 6000,
				KernelRunsInstrumented: 5980, Captured: 1, KernelNodes: 2, InstrumentedNodes: 2, State: GraphSwapped,
				Why: GraphRefused, CUResult: 801, WhyText: "the driver refused", Detail: "topology changed"}}},
		&GraphStamps{IDs: []GraphSeqID{{ID: 1, Ring: 3, Base: 0, End: GraphSeqOpen}, {ID: 2, Ring: 3, Base: 7, End: 9}},
			Runs: []GraphStampRun{{Ring: 3, First: 5, Lost: 2, Stamps: []uint64{10, 20, 1 << 60}}, {Ring: 4, Stamps: []uint64{}}}},
		&GraphStamps{IDs: []GraphSeqID{}, Runs: []GraphStampRun{}},
		&SanitizeRequest{Target: Target{Device: 1, Ctx: 5}, Flags: SanitizeAccount, Enter: "gpubpf_san_enter", Exit: "gpubpf_san_exit", Patch: []byte{0x7f, 'E', 'L', 'F'},
			Kernels: []SanitizeKernel{{Name: "_Z3fooPi", Index: 3}, {Name: "ampere_sgemm", Index: SanitizeLateIndex}}, Pool: []uint32{4, 5, 6}},
		&SanitizeRequest{Kernels: []SanitizeKernel{}, Pool: []uint32{}},
		&SanitizeReply{Ready: true, Launches: 8874, Threads: 418232448, Patched: 15, Selected: 40, PoolLeft: 2,
			Assigned: []SanitizeKernel{{Name: "ampere_sgemm", Index: 4}}},
		&SanitizeReply{Why: "GPUBPF_SANITIZER=off in the program's environment", Failures: 1, LastFailure: "x", Assigned: []SanitizeKernel{}},
		&LaunchRequest{Target: Target{Device: 1}, Function: 0x55aa, Grid: [3]uint32{4096, 2, 1}, Block: [3]uint32{256, 1, 1},
			SharedBytes: 48 << 10, Params: []byte{1, 2, 3, 4, 5, 6, 7, 8}, TimeoutMs: 10_000},
		&LaunchRequest{Function: 1, Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{1, 1, 1}},
		&LaunchReply{KernelNanos: 12_345, WallNanos: 80_000, Timed: true},
		&KernelTimesRequest{Action: KernelTimesRead, Flags: KernelTimesFinal},
		&KernelTimesReply{Library: "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13", Version: 130000, Names: []KernelTimeName{}, Records: []KernelTime{}},
		&KernelTimesReply{CUPTIDropped: 3, Dropped: 1 << 33, Names: []KernelTimeName{{ID: 7, Name: "_Z4gemmPf"}},
			Records: []KernelTime{{CPU: 1, Start: 2, End: 3, Grid: 1 << 47, Stream: 0x55, Ctx: 9, Name: 7, Device: -1, Graph: 4, Flags: 0}}},
	}
	for _, m := range msgs {
		p := Marshal(m)
		n := reflect.New(reflect.TypeOf(m).Elem()).Interface().(Message)
		if err := Unmarshal(p, n); err != nil {
			t.Fatalf("%T: %v", m, err)
		}
		if !reflect.DeepEqual(m, n) {
			t.Fatalf("%T: got %+v want %+v", m, n, m)
		}
	}
}

func TestReplyError(t *testing.T) {
	err := UnmarshalReply(OpLoad, MarshalError(StatusCUDA, 218, "the driver JIT rejected the PTX"), &LoadReply{})
	var e *Error
	if !errors.As(err, &e) || e.CUResult != 218 || e.Status != StatusCUDA {
		t.Fatalf("got %v", err)
	}
	var h Hello
	if err := UnmarshalReply(OpHello, MarshalReply(&Hello{PID: 3}), &h); err != nil || h.PID != 3 {
		t.Fatalf("got %v %+v", err, h)
	}
}

func TestFrame(t *testing.T) {
	f := AppendFrame(nil, OpList, 7, []byte{1, 2, 3})
	h, p, err := ReadFrame(bytes.NewReader(f))
	if err != nil || h.Op != OpList || h.Req != 7 || !bytes.Equal(p, []byte{1, 2, 3}) {
		t.Fatalf("%+v %v %v", h, p, err)
	}
	big := AppendFrame(nil, OpList, 1, nil)
	big[3] = 0xff // length > MaxFrame
	if _, _, err := ReadFrame(bytes.NewReader(big)); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("want ErrFrameTooLarge, got %v", err)
	}
}

// FuzzDecode: arbitrary bytes decode to an error, never a panic, and
// never allocate more than the input can justify.
func FuzzDecode(f *testing.F) {
	f.Add(MarshalReply(&Hello{Devices: []Device{{Name: "x"}}}))
	f.Add(MarshalReply(&Inventory{Modules: []Module{{ID: 1}}, Kernels: []Kernel{{Name: "k"}}}))
	f.Add(MarshalError(3, 1, "x"))
	f.Add(AppendFrame(nil, OpFetch, 1, MarshalReply(&FetchReply{Data: []byte("zz")})))
	f.Add(Marshal(&RingDrainRequest{Ring: 1, RegionID: 2, DataBytes: 4096, Release: []uint64{8}}))
	f.Add(MarshalReply(&RingDrainReply{Copied: 5}))
	f.Add(Marshal(&ActivateRequest{Kernel: 1, CloneID: 2, Function: 3, LaunchWords: LaunchWords{Hidden: 2, Params: 3,
		BufOffset: 16, Region: 4, Offset: 64, Slots: 8}}))
	f.Add(Marshal(&ClockRequest{Target: Target{Device: 0}, Rounds: 8}))
	f.Add(MarshalReply(&ClockReply{Offset: -5, Bound: 3, At: 9}))
	f.Add(Marshal(&LaunchRequest{Function: 9, Grid: [3]uint32{1, 2, 3}, Block: [3]uint32{4, 5, 6}, Params: []byte("p")}))
	f.Add(MarshalReply(&LaunchReply{KernelNanos: 1, WallNanos: 2, Timed: true}))
	f.Add(MarshalReply(&Hello{Direct: true, CUDAError: "no libcuda"}))
	f.Add(MarshalReply(&KernelTimesReply{Names: []KernelTimeName{{1, "k"}}, Records: []KernelTime{{CPU: 1, Name: 1}}}))
	f.Add(MarshalReply(&Graphs{Execs: []GraphExec{{Exec: 1, Launches: 2, KernelNodes: 2, WhyText: "w", Detail: "d"}}}))
	f.Add(MarshalReply(&GraphStamps{IDs: []GraphSeqID{{ID: 1, Ring: 1, End: GraphSeqOpen}},
		Runs: []GraphStampRun{{Ring: 1, First: 3, Stamps: []uint64{4}}}}))
	f.Add(Marshal(&SanitizeRequest{Enter: "e", Patch: []byte("cubin"), Kernels: []SanitizeKernel{{"k", 1}}}))
	f.Add(MarshalReply(&SanitizeReply{Ready: true, Launches: 1, LastFailure: "f"}))
	f.Add([]byte{0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, op := range allOps {
			if m := ReplyFor(op); m != nil {
				_ = UnmarshalReply(op, data, m)
			}
			if m := RequestFor(op); m != nil {
				_ = Unmarshal(data, m)
			}
		}
		_ = Unmarshal(data, &Module{})
		_ = Unmarshal(data, &ProbeFailed{})
		_ = Unmarshal(data, &Device{})
		h, p, err := ReadFrame(bytes.NewReader(data))
		if err == nil && int(h.Len) != len(p) {
			t.Fatalf("frame length %d, payload %d", h.Len, len(p))
		}
		if err == nil && len(p) > len(data) {
			t.Fatalf("payload larger than input")
		}
	})
}

// The agent (ops.c op_activate, clock.c op_clock) decodes these layouts field by
// field: keep them byte for byte.
func TestWireLayout(t *testing.T) {
	a := Marshal(&ActivateRequest{Kernel: 1, CloneID: 2, Function: 3, LaunchWords: LaunchWords{Hidden: 2, Params: 5,
		BufOffset: 40, Region: 6, Offset: 7, Slots: 8}})
	want := []byte{
		1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, // kernel, clone, function
		2, 0, 0, 0, 5, 0, 0, 0, 40, 0, 0, 0, // hidden, params, buf offset
		6, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, // region, offset
		8, 0, 0, 0, // slots
	}
	if !bytes.Equal(a, want) {
		t.Fatalf("activate request\n got % x\nwant % x", a, want)
	}
	c := Marshal(&ClockRequest{Target: Target{Device: 1, Ctx: 2}, Rounds: 3})
	if want := []byte{1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0}; !bytes.Equal(c, want) {
		t.Fatalf("clock request % x", c)
	}
	var r ClockReply
	p := MarshalReply(&ClockReply{Offset: -2, Bound: 3, At: 4})
	if err := UnmarshalReply(OpClock, p, &r); err != nil || r.Offset != -2 || len(p) != 4+24 {
		t.Fatalf("clock reply %+v %v (%d bytes)", r, err, len(p))
	}
	if OpClock.String() != "clock" {
		t.Fatalf("OpClock is %q", OpClock)
	}
	l := Marshal(&LaunchRequest{Target: Target{Device: 1, Ctx: 2}, Function: 3, Grid: [3]uint32{4, 5, 6},
		Block: [3]uint32{7, 8, 9}, SharedBytes: 10, Params: []byte{0xaa, 0xbb}, TimeoutMs: 11})
	want = []byte{
		1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, // target
		3, 0, 0, 0, 0, 0, 0, 0, // function
		4, 0, 0, 0, 5, 0, 0, 0, 6, 0, 0, 0, // grid
		7, 0, 0, 0, 8, 0, 0, 0, 9, 0, 0, 0, // block
		10, 0, 0, 0, // shared bytes
		2, 0, 0, 0, 0xaa, 0xbb, // params
		11, 0, 0, 0, // timeout ms
	}
	if !bytes.Equal(l, want) {
		t.Fatalf("launch request\n got % x\nwant % x", l, want)
	}
	if OpLaunch.String() != "launch" {
		t.Fatalf("OpLaunch is %q", OpLaunch)
	}
}
