package runtime

import (
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/gpubpf/gpubpf/pkg/runtime/agentproto"
	"github.com/gpubpf/gpubpf/pkg/runtime/gpumap"
	"github.com/gpubpf/gpubpf/pkg/runtime/graphs"
	"github.com/gpubpf/gpubpf/pkg/runtime/jit"
	"github.com/gpubpf/gpubpf/pkg/runtime/tritoncache"
	"github.com/gpubpf/gpubpf/pkg/runtime/verify"
)

// Options configure a Session.
type Options struct {
	// Programs, when set, keeps only these programs of the object.
	Programs []string
	// Kernels, when set, retargets every GPU program at these patterns
	// (a tool's --kernel flag) instead of the kernel its section names.
	Kernels []string
	// Client names the tool in the agent's log.
	Client string
	// Threads is the per-GPU-thread array capacity (0: gpumap's default).
	Threads uint32
	// RingBytes is the data size of each GPU ring buffer per device, a
	// power of two (0: gpumap.RingBytes of the map's max_entries).
	RingBytes uint64
	// RingWait is how long a GPU warp waits for room in a full ring of the
	// program's before it drops its records (a tool's --no-drop; 0: drop
	// at once, the kernel never slowed for the tool). The trace_printk
	// ring always drops.
	RingWait time.Duration
	// Log receives progress lines (-v); nil keeps quiet.
	Log io.Writer
	// LaunchWords names a map shared with the kernel (type 1504 or an
	// array) of 16-byte per-thread slots {CPU time ns, tid<<32 | kind}
	// that CPU programs fill as a thread calls a launch API: the agent
	// hands the launching thread's slot to the instrumented launch, where
	// bpf_gpu_launch_word(0) is that time (0: no fresh stamp from this
	// thread) and bpf_gpu_launch_word(1) the stream | kind<<56. Slot i
	// serves threads with tid*4 % max_entries == i; max_entries must be a
	// power of two.
	LaunchWords string
	// OptionalUprobes: a CPU program whose function no object of the
	// process defines (cudaLaunchKernel in a driver-API program) is left
	// out instead of failing the attach; it is tried again as libraries
	// load. Attaching fails only when none of them attaches.
	OptionalUprobes bool
	// UprobeTargets name, by program, the function a bare uprobe or
	// uretprobe program (section "uprobe"/"uretprobe": its own loader
	// would pick the target at run time) attaches to: gpubpf run's
	// --attach PROG=SYMBOL[@PATH].
	UprobeTargets map[string]UprobeTarget
	// Warn receives what the user must hear during a trace even without
	// -v (a uprobe that cannot be attached); nil sends it to Log.
	Warn io.Writer
	// NoInject: a running process without the agent is refused (the
	// tools' --no-inject) instead of getting it loaded with ptrace.
	NoInject bool
	// Clocks: calibrate each context's %globaltimer against the CPU clock
	// as its maps are placed and again at the process's last look (before
	// it exits), besides Calibrate; ClockSamples returns them all, so even
	// a program that lives under a second has its launches bracketed.
	Clocks bool
	// ProcessGone, if set, is called once for each traced process that
	// exits (after its last look), on a goroutine of its own.
	ProcessGone func(pid int)
	// Devices: trace only the kernels on these device ordinals (none: on
	// every device the program uses). The others run untouched: no clone,
	// no map is placed there.
	Devices []int
	// KernelTimes: when to turn CUPTI's kernel records on in a process
	// (the agent finds libcupti there), for KernelTimes: each kernel's GPU
	// start and end with its launch call's CPU time, kernels without PTX
	// included. A process where CUPTI cannot be had is traced without
	// them, its reason in Stats.KernelTimesOff.
	KernelTimes KernelTimesMode
	// LoopBudget: the iterations a probe's thread may run through the loop
	// heads of one function call, where the loops' bounds come from data
	// and the verifier proved only their memory safety (0:
	// DefaultLoopBudget). A call that spends it returns 0, the probe goes
	// no further and the application's kernel goes on; Stats.LoopBudgetSpent
	// counts those returns.
	LoopBudget uint64
	// Direct: the session runs the object's direct programs (sections
	// gpu/direct, kprobe/__directly_run) as kernels of their own with
	// RunDirect, and nothing else; without it they are left out. With
	// Programs, they run in that order.
	Direct bool
}

// DefaultLoopBudget is Options.LoopBudget's default: loop heads a probe's
// thread passes in one function call. bpftime's GEMM passes K of them; a
// thread that spends the budget costs its kernel about as much as a
// 65,536-step loop, milliseconds, not a hang.
const DefaultLoopBudget = 1 << 16

// KernelTimesMode says when a session turns CUPTI's kernel records on.
type KernelTimesMode int

const (
	KernelTimesOff KernelTimesMode = iota
	// KernelTimesWhenNeeded: at the first kernel of the process that no
	// probe can time: as a module with a kernel without PTX is read (for
	// the modules a program registers as it starts, before its first CUDA
	// call), or as a kernel's instrumentation fails; with -p, before the
	// modules loaded before the agent are read where that is much code.
	// CUPTI costs launch-bound programs launch rate (launch_heavy_sass:
	// its kernel records alone x0.94 on the H100, x0.72 on the H200; with
	// the launch stamps x0.58-0.74), which a program whose kernels all
	// have probes need not pay.
	KernelTimesWhenNeeded
	// KernelTimesAlways: at the attach.
	KernelTimesAlways
)

// Batch is a run of records from one ring of one process and device, in
// the order the GPU reserved them, or trace_printk/bpf_puts lines.
type Batch struct {
	PID    int
	Device int
	// Ctx: 0 for the device's primary context (every module of it shares
	// one placement), else the application's own context the ring is in:
	// grid ids are unique per context.
	Ctx uint64
	// Map names the ring buffer; empty for trace_printk/bpf_puts output,
	// which is in Lines.
	Map   string
	Lines []string
	// record i is data[starts[i]:ends[i]]: runs of ring memory copied
	// whole, record headers and discarded records between
	data         []byte
	starts, ends []uint32
	// hold: the ring shard whose mirror data points into (records in
	// place), seq the batch's number there; nil for a batch of its own
	hold *ringHold
	seq  uint64
}

// Len is the number of records in the batch.
func (b *Batch) Len() int { return len(b.ends) }

// Record returns record i (valid until Release).
func (b *Batch) Record(i int) []byte {
	return b.data[b.starts[i]:b.ends[i]]
}

// NewBatch is a batch of the given records from ring of process pid's
// device dev (context ctx), as a drain delivers them: for a tool's tests,
// or records it replays.
func NewBatch(pid, dev int, ctx uint64, ring string, records ...[]byte) *Batch {
	b := &Batch{PID: pid, Device: dev, Ctx: ctx, Map: ring}
	for _, r := range records {
		b.starts = append(b.starts, uint32(len(b.data)))
		b.data = append(b.data, r...)
		b.ends = append(b.ends, uint32(len(b.data)))
	}
	return b
}

// Release gives the batch's records back to their ring: a drained ring's
// records are handed to the tool in place, and the GPU writes over them
// only once the tool released them, so a tool must call it once it is done
// with a batch (a tool that holds batches fills the ring, and the GPU then
// counts drops). The batch and its records must not be used after.
func (b *Batch) Release() {
	if b != nil && b.hold != nil {
		b.releaseInPlace()
	}
}

// Session is one tool's attachment of one BPF collection to any number of
// processes.
type Session struct {
	spec *ebpf.CollectionSpec
	opts Options
	gpu  []GPUProgram
	cpu  []CPUProgram
	kern *kernelSide
	// mirrored: the shared maps whose GPU adds gather in device memory,
	// with their add width; hostViews: their values mapped in the tool;
	// folds: the mirrors' folds so far (mirror.go)
	mirrored  map[string]int
	viewMu    sync.Mutex
	hostViews map[string][]byte
	folds     atomic.Uint64
	// hostMaps: the sizes of the host-backed maps (1512, 1513), the same
	// in every context (planHostMaps).
	hostMaps map[string]gpumap.Placement
	// constants: read-only global data the compiler folds (ReadOnlyData)
	constants map[string][]byte
	// triton: the cubins of the processes' Triton caches, by content: the
	// PTX of a Triton kernel loaded as a cubin (tritoncache)
	triton *tritoncache.Cache

	batches chan *Batch
	// sendMu guards sending on batches against its close.
	sendMu     sync.RWMutex
	sendClosed bool
	// consumed: a tool reads Batches, so delivery may wait for it (the
	// GPU then drops, counted) instead of discarding batches.
	consumed atomic.Bool

	mu    sync.Mutex
	procs map[int]*Process
	// kernels numbers every kernel a probe was placed in, in the order
	// first seen: what bpf_gpu_kernel_index returns there.
	kernels   map[string]uint32
	kernelIdx []string
	// usesKernelIndex: a GPU program calls bpf_gpu_kernel_index, so its
	// output has kernel indexes a tool should name.
	usesKernelIndex bool
	// budgeted: the programs that run with the loop budget
	// (verify.Verdict.LoopBudget), by name
	budgeted map[string]bool
	gone     []*Process  // detached, kept for their counters
	fatbins  fatbinCache // device code of mapped files (late.go)
	closed   bool
	running  int  // CommandRunning
	woundUp  bool // windUp
	stats    Stats
	clocks   []ClockSample
	// sink, set by RunDirect while it drains after a kernel, takes the
	// batches instead of Batches (they belong to that kernel).
	sink func(*Batch)
}

// ReadOnlyData is the contents of each read-only global data map of spec
// (.rodata: constants and the tools' const volatile knobs, with the values
// set through spec.Variables folded in by withVariables), by map name, for
// jit.Options.Constants. The verifier refuses a program that writes them
// (the kernel twins keep BPF_F_RDONLY_PROG), so the GPU never sees other
// values.
func ReadOnlyData(spec *ebpf.CollectionSpec) map[string][]byte {
	out := map[string][]byte{}
	for name, ms := range spec.Maps {
		if ms.Flags&unix.BPF_F_RDONLY_PROG == 0 || len(ms.Contents) != 1 {
			continue
		}
		if k, err := gpumap.KindOf(ms); err != nil || k != gpumap.Array {
			continue
		}
		key, kok := ms.Contents[0].Key.(uint32)
		v, vok := ms.Contents[0].Value.([]byte)
		if kok && vok && key == 0 {
			out[name] = v
		}
	}
	return out
}

// withVariables folds the values a tool set through spec.Variables (its
// const volatile knobs) into the contents of their data sections: the GPU
// side places .rodata/.data from Contents, while cilium/ebpf applies
// Variables only when it loads a collection into the kernel.
func withVariables(spec *ebpf.CollectionSpec) (*ebpf.CollectionSpec, error) {
	if len(spec.Variables) == 0 {
		return spec, nil
	}
	out := spec.Copy()
	for name, vs := range out.Variables {
		ms := out.Maps[vs.SectionName]
		if ms == nil || vs.Value == nil {
			continue
		}
		if len(ms.Contents) == 0 { // .bss: zeros
			ms.Contents = []ebpf.MapKV{{Key: uint32(0), Value: make([]byte, ms.ValueSize)}}
		}
		if len(ms.Contents) != 1 {
			return nil, fmt.Errorf("variable %s: section %s has %d values, want 1", name, vs.SectionName, len(ms.Contents))
		}
		data, ok := ms.Contents[0].Value.([]byte)
		end := int(vs.Offset) + len(vs.Value)
		if !ok || end > len(data) {
			return nil, fmt.Errorf("variable %s lies outside section %s", name, vs.SectionName)
		}
		data = slices.Clone(data)
		copy(data[vs.Offset:end], vs.Value)
		ms.Contents = []ebpf.MapKV{{Key: ms.Contents[0].Key, Value: data}}
	}
	return out, nil
}

// Traces says whether the session traces device ordinal dev (Options.Devices).
func (s *Session) Traces(dev int) bool {
	return len(s.opts.Devices) == 0 || slices.Contains(s.opts.Devices, dev)
}

// KernelIndex is the number bpf_gpu_kernel_index returns in kernel (a
// mangled name), assigned on first use and the same in every process of
// the session. The unknown kernel ("") is jit.UnknownKernel.
func (s *Session) KernelIndex(kernel string) uint32 {
	if kernel == "" {
		return jit.UnknownKernel
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if i, ok := s.kernels[kernel]; ok {
		return i
	}
	if s.kernels == nil {
		s.kernels = map[string]uint32{}
	}
	i := uint32(len(s.kernelIdx))
	s.kernels[kernel] = i
	s.kernelIdx = append(s.kernelIdx, kernel)
	return i
}

// ReserveKernelIndexes sets n kernel indexes aside, nameless until
// NameKernelIndex names them: the sanitizer path gives them to the kernels
// that run first, at their first launch (agentproto.SanitizeLateIndex).
func (s *Session) ReserveKernelIndexes(n int) []uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(len(s.kernelIdx))
		s.kernelIdx = append(s.kernelIdx, "")
	}
	return out
}

// NameKernelIndex names a reserved index: kernel (a mangled name) got it.
// A kernel that already had an index keeps it for KernelIndex; both
// indexes name it.
func (s *Session) NameKernelIndex(i uint32, kernel string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if int(i) >= len(s.kernelIdx) || s.kernelIdx[i] != "" {
		return
	}
	s.kernelIdx[i] = kernel
	if s.kernels == nil {
		s.kernels = map[string]uint32{}
	}
	if _, ok := s.kernels[kernel]; !ok {
		s.kernels[kernel] = i
	}
}

// KernelName is the mangled name of the kernel bpf_gpu_kernel_index
// returned i for, or "" for an index not assigned (jit.UnknownKernel).
func (s *Session) KernelName(i uint32) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if int(i) < len(s.kernelIdx) {
		return s.kernelIdx[i]
	}
	return ""
}

// KernelIndexes lists, by index, the kernels bpf_gpu_kernel_index has
// numbered so far (mangled names).
func (s *Session) KernelIndexes() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.kernelIdx)
}

// UsesKernelIndex reports whether a GPU program of the session calls
// bpf_gpu_kernel_index: the numbers in its maps and records then stand for
// kernels, which KernelIndexes names.
func (s *Session) UsesKernelIndex() bool { return s.usesKernelIndex }

// Stats account for everything a session saw, for the tools' final
// completeness line.
type Stats struct {
	Processes      int
	KernelsMatched map[string]bool   // mangled names instrumented somewhere
	KernelsSkipped map[string]string // mangled name -> why
	// KernelsSanitized: of KernelsMatched, those without PTX that run the
	// programs through the Compute Sanitizer (docs/sanitizer.md);
	// Sanitizer: by process, the agent's account of that path.
	KernelsSanitized map[string]bool
	Sanitizer        map[int]agentproto.SanitizeReply // by process, the last account
	KernelsSeen      map[string]bool                  // every kernel name of the traced processes' modules
	Records          uint64                           // ring-buffer records delivered to the tool
	RecordsLost      uint64                           // records delivered while no one read Batches
	RecordsProduced  uint64                           // records GPU producers tried to write (GPU count)
	RingDrops        uint64                           // records GPU producers dropped (ring full; GPU count)
	RingWaits        uint64                           // warps that found a ring full and waited for room (Options.RingWait; GPU count)
	RingWaitDrops    uint64                           // of those, warps that waited the whole bound and dropped (in RingDrops too)
	LoopBudgetSpent  uint64                           // probe function calls that spent their loop budget and returned 0 (GPU count)
	RecordsDiscard   uint64                           // records the program reserved and discarded
	RingPending      uint64                           // bytes reserved on the GPU not consumed yet (in flight)
	Drains           uint64                           // ring drains (agent round trips)
	DrainBytes       uint64                           // record bytes the drains copied from the GPU
	DrainTime        time.Duration                    // time spent in drain round trips
	DrainAgent       time.Duration                    // of which the agent worked on them
	DrainWait        time.Duration                    // of which the agent waited for its copies
	DrainAgentBusy   time.Duration                    // of the rest, the agent still busy after the reply before
	DrainAgentPost   time.Duration                    // the agent's time from that reply to its next read, where busy
	DrainToAgent     time.Duration                    // and from then (or the tool's call) to the agent's read
	DrainFromAgent   time.Duration                    // and from the agent's reply to the tool's
	DrainScan        time.Duration                    // after the reply: the tool scanning the copies into batches
	DrainDeliver     time.Duration                    // and handing them to the session (waits while it is behind)
	PrintkLines      uint64                           // trace_printk/bpf_puts lines delivered
	SharedMirrored   []string                         // maps shared with the CPU whose GPU adds gather in device memory (mirror.go)
	SharedFolds      uint64                           // their folds into the kernel's maps so far
	MapErrors        map[string]uint64                // map -> out-of-range/full errors counted on the GPU
	Launches         uint64                           // instrumented launches (agent count)
	LaunchFailures   uint64                           // instrumented launches the driver refused (original ran)
	FirstAttach      time.Duration                    // tool start -> first clone active
	JIT              time.Duration                    // time spent in the driver JIT, all clones
	Clones           int
	ProbeFailures    []string
	// NotTraced says what the trace could not see, in words: a module
	// loaded before an injected agent came whose code nothing holds; driver
	// entry points an object bound after the attach (a CUDA runtime that
	// started late), whose launches went untraced until the agent found
	// them.
	NotTraced []string
	// KernelTimesFrom: by process, the libcupti giving kernel times
	// (Options.KernelTimes); KernelTimesOff: why a process has none.
	KernelTimesFrom map[int]string
	KernelTimesOff  map[int]string
	// KernelTimesDropped: kernel records CUPTI or the agent dropped (no
	// buffer; the tool read too slowly); KernelTimesRecords: by process,
	// the records delivered.
	KernelTimesDropped uint64
	KernelTimesRecords map[int]uint64
	// KernelTimesCUPTI: by process, the agent's last account of what CUPTI
	// handed over (buffers, records by kind, how launches are stamped):
	// what to look at where no record comes.
	KernelTimesCUPTI map[int]string
	// KernelTimesLate: by process attached while it ran (-p), how long
	// after the attach CUPTI came on: kernels without PTX launched in
	// between are in no count.
	KernelTimesLate map[int]time.Duration
	// Graphs: the executable CUDA graphs each process launched during the
	// trace, with what of their launches and kernel-node runs ran
	// instrumented, and why not (graphs.Sum adds them up).
	Graphs          []graphs.Exec
	firstAttachDone bool
}

// Open prepares a session for spec: splits GPU and CPU programs, loads the
// CPU programs and shared maps into the kernel, and compiles every GPU
// program once with placeholder map addresses so that a program the GPU
// compiler refuses is reported now, before anything is attached.
func Open(spec *ebpf.CollectionSpec, opts Options) (*Session, error) {
	all := spec
	if len(opts.Programs) > 0 {
		keep := spec.Copy()
		keep.Programs = map[string]*ebpf.ProgramSpec{}
		for _, name := range opts.Programs {
			p := spec.Programs[name]
			if p == nil {
				return nil, fmt.Errorf("--program %s: the object has no program %s; its programs are %s", name, name, strings.Join(sortedKeys(spec.Programs), ", "))
			}
			keep.Programs[name] = p
		}
		spec = keep
	}
	spec, err := withVariables(spec)
	if err != nil {
		return nil, err
	}
	gpu, cpu, err := SplitPrograms(spec)
	if err != nil {
		return nil, err
	}
	if len(gpu) == 0 && len(cpu) == 0 {
		return nil, fmt.Errorf("the object has no programs: put each in a GPU section (SEC(\"kprobe/KERNEL\"), SEC(\"kretprobe/KERNEL\"), SEC(\"kprobe/%s\") for memory accesses) or a uprobe section (SEC(\"uprobe/PATH:SYMBOL\")) and rebuild it", MemCapture)
	}
	if gpu, cpu, err = pickDirect(gpu, cpu, opts); err != nil {
		return nil, err
	}
	if err := bindUprobes(all, cpu, opts.UprobeTargets); err != nil {
		return nil, err
	}
	if err := CheckGPUMaps(spec, gpu); err != nil {
		return nil, err
	}
	hostMaps, err := planHostMaps(spec, gpu, opts.Threads)
	if err != nil {
		return nil, err
	}
	if len(opts.Kernels) > 0 {
		for i := range gpu {
			gpu[i].Kernel = "" // retargeted: see kernelPatterns
		}
	}
	s := &Session{
		spec:      spec,
		opts:      opts,
		gpu:       gpu,
		cpu:       cpu,
		hostMaps:  hostMaps,
		constants: ReadOnlyData(spec),
		batches:   make(chan *Batch, batchQueue),
		procs:     map[int]*Process{},
		stats:     Stats{KernelsMatched: map[string]bool{}, KernelsSkipped: map[string]string{}, KernelsSanitized: map[string]bool{}, KernelsSeen: map[string]bool{}, MapErrors: map[string]uint64{}},
	}
	// The kernel's verifier judges every GPU program before anything is
	// started: a program it refuses never reaches the GPU.
	checks := make([]verify.Check, len(gpu))
	for i, g := range gpu {
		checks[i] = verify.Check{Spec: g.Spec, Options: verify.Options{Direct: g.Direct()}}
	}
	if err := verify.Programs(spec, checks); err != nil {
		return nil, err
	}
	for _, c := range checks {
		if c.Verdict.LoopBudget {
			if s.budgeted == nil {
				s.budgeted = map[string]bool{}
			}
			s.budgeted[c.Spec.Name] = true
			s.logf("GPU program %s: its loops' bounds come from data: each runs with an iteration budget of %d per call", c.Spec.Name, s.loopBudget())
		}
	}
	for _, g := range gpu {
		f, err := s.compile(g, placeholderPlacements(spec, g), gpumap.Placement{Kind: gpumap.RingBuf, Addr: 0x7f0000000000, HostResident: true, MaxEntries: 1 << 20}, 0)
		if err != nil {
			return nil, err
		}
		s.usesKernelIndex = s.usesKernelIndex || f.UsesKernelIndex
	}
	if name := opts.LaunchWords; name != "" {
		m := spec.Maps[name]
		switch {
		case m == nil:
			return nil, fmt.Errorf("launch words: the object has no map %s", name)
		case m.Type != MapTypeKernelShared && m.Type != ebpf.Array:
			return nil, fmt.Errorf("launch words: map %s is a %v; it must be shared with the kernel (type 1504 or an array)", name, m.Type)
		case m.ValueSize != 16 || m.MaxEntries == 0 || m.MaxEntries&(m.MaxEntries-1) != 0:
			return nil, fmt.Errorf("launch words: map %s has %d-byte values and %d entries; want 16-byte slots and a power-of-two count", name, m.ValueSize, m.MaxEntries)
		}
	}
	if s.kern, err = loadKernelSide(spec, gpu, cpu); err != nil {
		return nil, err
	}
	if s.mirrored, err = mirroredMaps(gpu, s.kern.shared, opts.LaunchWords); err != nil {
		s.kern.Close()
		return nil, err
	}
	return s, nil
}

// pickDirect keeps what the session runs: the direct programs alone
// (opts.Direct, in opts.Programs' order), or everything else. What is left
// out gets a one-line note.
func pickDirect(gpu []GPUProgram, cpu []CPUProgram, opts Options) ([]GPUProgram, []CPUProgram, error) {
	probes, direct := partitionDirect(gpu)
	note := func(format string, args ...any) {
		w := opts.Warn
		if w == nil {
			w = opts.Log
		}
		if w != nil {
			fmt.Fprintf(w, format+"\n", args...)
		}
	}
	if !opts.Direct {
		if len(direct) == 0 {
			return gpu, cpu, nil
		}
		if len(probes) == 0 && len(cpu) == 0 {
			return nil, nil, fmt.Errorf("its programs (%s) are all direct GPU programs (section %s or %s), kernels of their own that run with no application: run them with gpubpf run --direct",
				strings.Join(programNames(direct), ", "), SectionDirect, SectionDirectBpftime)
		}
		note("note: direct program(s) %s left out: they run only with --direct", strings.Join(programNames(direct), ", "))
		return probes, cpu, nil
	}
	if len(direct) == 0 {
		return nil, nil, fmt.Errorf("--direct runs programs in SEC(\"%s\") or SEC(\"%s\") sections, and the object has none (its programs: %s): move a program to such a section, or run the object against an application with -- CMD",
			SectionDirect, SectionDirectBpftime, strings.Join(append(programNames(probes), cpuNames(cpu)...), ", "))
	}
	if n := len(probes) + len(cpu); n > 0 {
		note("note: %d probe(s) left out (%s): --direct runs only the direct programs", n, strings.Join(append(programNames(probes), cpuNames(cpu)...), ", "))
	}
	if len(opts.Programs) > 0 {
		at := map[string]int{}
		for i, n := range opts.Programs {
			at[n] = i
		}
		sort.SliceStable(direct, func(i, j int) bool { return at[direct[i].Spec.Name] < at[direct[j].Spec.Name] })
	}
	return direct, nil, nil
}

func programNames(gpu []GPUProgram) []string {
	out := make([]string, len(gpu))
	for i, g := range gpu {
		out[i] = g.Spec.Name
	}
	return out
}

func cpuNames(cpu []CPUProgram) []string {
	out := make([]string, len(cpu))
	for i, c := range cpu {
		out[i] = c.Spec.Name
	}
	return out
}

// GPUPrograms and CPUPrograms describe what the session runs.
func (s *Session) GPUPrograms() []GPUProgram { return s.gpu }
func (s *Session) CPUPrograms() []CPUProgram { return s.cpu }

// Patterns lists the kernel patterns the session's GPU programs attach to.
func (s *Session) Patterns() []string {
	seen := map[string]bool{}
	var out []string
	for _, g := range s.gpu {
		for _, p := range s.kernelPatterns(g) {
			if !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	return out
}

// kernelPatterns is what program g attaches to.
func (s *Session) kernelPatterns(g GPUProgram) []string {
	if len(s.opts.Kernels) > 0 {
		return s.opts.Kernels
	}
	return []string{g.Kernel}
}

// Batches delivers ring-buffer records and trace_printk lines of every
// process, in order per ring. A tool that reads it must keep reading until
// it is closed (by Close, after the last records): a slow reader makes the
// GPU drop records (counted in Stats), never the tool.
func (s *Session) Batches() <-chan *Batch {
	s.consumed.Store(true)
	return s.batches
}

func (s *Session) logf(format string, args ...any) {
	if s.opts.Log != nil {
		fmt.Fprintf(s.opts.Log, format+"\n", args...)
	}
}

// warnf says what the user must hear even without -v (Options.Warn).
func (s *Session) warnf(format string, args ...any) {
	w := s.opts.Warn
	if w == nil {
		w = s.opts.Log
	}
	if w != nil {
		fmt.Fprintf(w, format+"\n", args...)
	}
}

var nonIdent = regexp.MustCompile(`[^A-Za-z0-9_]`)

func probeFuncName(prog string) string { return "gpubpf_" + nonIdent.ReplaceAllString(prog, "_") }

// compile compiles one GPU program against real or placeholder placements.
func (s *Session) compile(g GPUProgram, maps map[string]gpumap.Placement, printk gpumap.Placement, pid uint32) (*jit.Function, error) {
	var budget uint64
	if s.budgeted[g.Spec.Name] {
		budget = s.loopBudget()
	}
	f, err := jit.Compile(g.Spec, jit.Options{Maps: maps, Printk: printk, PID: pid, FuncName: probeFuncName(g.Spec.Name), Constants: s.constants, LoopBudget: budget})
	if err != nil {
		return nil, fmt.Errorf("GPU program %s (section %s): %w", g.Spec.Name, g.Spec.SectionName, err)
	}
	return f, nil
}

func (s *Session) loopBudget() uint64 {
	if s.opts.LoopBudget > 0 {
		return s.opts.LoopBudget
	}
	return DefaultLoopBudget
}

// CheckGPUMaps refuses, before anything is loaded or started, a map a GPU
// program uses that the GPU cannot hold (an LRU hash, a per-CPU map): at
// attach time it would only skip every kernel.
func CheckGPUMaps(spec *ebpf.CollectionSpec, gpu []GPUProgram) error {
	for _, g := range gpu {
		for _, name := range verify.ReferencedMaps(g.Spec) {
			m := spec.Maps[name]
			if m == nil {
				return fmt.Errorf("GPU program %s (section %q) uses map %s, which the object does not define; rebuild the object from its source", g.Spec.Name, g.Spec.SectionName, name)
			}
			if _, err := gpumap.KindOf(m); err != nil {
				return fmt.Errorf("GPU program %s (section %q): %w", g.Spec.Name, g.Spec.SectionName, err)
			}
		}
	}
	return nil
}

// placeholderPlacements gives every map program g uses a distinct fake
// address, for the compile check in Open.
func placeholderPlacements(spec *ebpf.CollectionSpec, g GPUProgram) map[string]gpumap.Placement {
	out := map[string]gpumap.Placement{}
	addr := uint64(0x7e0000000000)
	for _, name := range verify.ReferencedMaps(g.Spec) {
		m := spec.Maps[name]
		if m == nil {
			continue
		}
		pl, err := gpumap.PlacementOf(m)
		if err != nil {
			continue // refused by CheckGPUMaps before the compile check
		}
		pl.Addr = addr
		out[name] = pl
		addr += 1 << 32
	}
	return out
}

// everyProcessLocked is every process of the session, attached or gone
// (s.mu held).
func (s *Session) everyProcessLocked() []*Process {
	procs := make([]*Process, 0, len(s.procs)+len(s.gone))
	for _, p := range s.procs {
		procs = append(procs, p)
	}
	return append(procs, s.gone...)
}

// Stats returns a copy of the session's accounting, with the agents' launch
// counts and the rings' drop counters read now.
func (s *Session) Stats() Stats {
	s.mu.Lock()
	procs := s.everyProcessLocked()
	st := s.stats
	st.KernelsMatched = copyMap(s.stats.KernelsMatched)
	st.KernelsSkipped = copyMap(s.stats.KernelsSkipped)
	st.KernelsSanitized = copyMap(s.stats.KernelsSanitized)
	st.KernelsSeen = copyMap(s.stats.KernelsSeen)
	st.MapErrors = copyMap(s.stats.MapErrors)
	st.ProbeFailures = append([]string(nil), s.stats.ProbeFailures...)
	st.NotTraced = append([]string(nil), s.stats.NotTraced...)
	st.KernelTimesFrom = maps.Clone(s.stats.KernelTimesFrom)
	st.KernelTimesOff = maps.Clone(s.stats.KernelTimesOff)
	st.KernelTimesRecords = maps.Clone(s.stats.KernelTimesRecords)
	st.KernelTimesCUPTI = maps.Clone(s.stats.KernelTimesCUPTI)
	st.KernelTimesLate = maps.Clone(s.stats.KernelTimesLate)
	s.mu.Unlock()
	st.SharedMirrored = sortedKeys(s.mirrored)
	st.SharedFolds = s.folds.Load()
	for _, p := range procs {
		p.addStats(&st)
	}
	return st
}

// Complete reports whether every record the GPU produced is accounted for:
// produced = delivered (records and printk lines) + dropped + discarded,
// nothing in flight.
func (st Stats) Complete() bool {
	return st.RingPending == 0 && st.RecordsProduced == st.Records+st.PrintkLines+st.RecordsLost+st.RingDrops+st.RecordsDiscard
}

func copyMap[V any](m map[string]V) map[string]V {
	out := make(map[string]V, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// Processes returns the attached processes, by PID.
func (s *Session) Processes() []*Process {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*Process, 0, len(s.procs))
	for _, p := range s.procs {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PID < out[j].PID })
	return out
}

// Detach detaches from one process: the agent restores its kernels.
func (s *Session) Detach(pid int) error {
	s.mu.Lock()
	p := s.procs[pid]
	delete(s.procs, pid)
	if p != nil {
		s.gone = append(s.gone, p)
	}
	s.mu.Unlock()
	if p == nil {
		return fmt.Errorf("process %d is not attached", pid)
	}
	return p.close()
}

// Close detaches from every process and unloads the CPU programs.
func (s *Session) Close() error {
	s.windUp()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	procs := s.procs
	s.procs = map[int]*Process{}
	for _, p := range procs {
		s.gone = append(s.gone, p)
	}
	s.mu.Unlock()
	var first error
	for _, p := range procs {
		if err := p.close(); err != nil && first == nil {
			first = err
		}
	}
	s.sendMu.Lock() // every process drained its rings for the last time
	s.sendClosed = true
	close(s.batches)
	s.sendMu.Unlock()
	s.unmapHostViews() // no process folds any more
	s.kern.Close()
	return first
}

// prints says whether a GPU program of the session prints (verify.Prints).
func (s *Session) prints() bool {
	for _, g := range s.gpu {
		if verify.Prints(g.Spec) {
			return true
		}
	}
	return false
}
