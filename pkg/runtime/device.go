package runtime

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/gpubpf/gpubpf/pkg/runtime/agentproto"
	"github.com/gpubpf/gpubpf/pkg/runtime/gpumap"
	"github.com/gpubpf/gpubpf/pkg/runtime/instrument"
	"github.com/gpubpf/gpubpf/pkg/runtime/jit"
	"github.com/gpubpf/gpubpf/pkg/runtime/verify"
)

// perThreadBudget caps the device memory one per-thread array may take when
// the tool does not say how many threads to expect.
const perThreadBudget = 1 << 30

// hostMapBudget caps the pinned host memory of the host-backed maps (1512,
// 1513) in each GPU context: their pages stay locked in the application's
// RAM for the whole trace, so unlike device memory they take from what the
// application and the machine have to live on.
const hostMapBudget = 1 << 30

// printkRingBytes is the size of each device's trace_printk ring.
const printkRingBytes = 1 << 20

// hostDataRings puts ring data in pinned host memory the GPU writes
// directly, instead of device memory drained by the agent: the other event
// path design, kept to measure against (GPUBPF_RING=host; docs/event-path.md).
var hostDataRings = os.Getenv("GPUBPF_RING") == "host"

// ringShards overrides the shard count of event rings (GPUBPF_RING_SHARDS,
// a power of two; 0: gpumap.DefaultShards), to measure designs against
// each other (docs/event-path.md).
var ringShards = envShards()

func envShards() uint32 {
	n, err := strconv.ParseUint(os.Getenv("GPUBPF_RING_SHARDS"), 10, 16)
	if err != nil || n == 0 || n&(n-1) != 0 {
		return 0
	}
	return uint32(n)
}

// device is what a session placed in one CUDA context of one process: the
// GPU maps, the trace_printk ring and the programs compiled against them.
type device struct {
	p      *Process
	target agentproto.Target
	maps   map[string]*placedMap
	printk *placedMap
	funcs  map[string]*jit.Function
	// clocked: calibrated once on placement (Options.Clocks).
	clocked atomic.Bool
}

// placedMap is one map as it lives in a process.
type placedMap struct {
	name  string
	spec  *ebpf.MapSpec
	place gpumap.Placement
	// rings: the host mirror (memfd, registered with the agent) and its
	// reader; the control block (and data) at devAddr.
	// host-backed maps (host): the map itself, header and values, which
	// the GPU writes and the tool reads in place.
	// maps in device memory: a mirror for live reads (readLive), made on
	// the first.
	file   *os.File
	mem    []byte
	region uint64
	ring   *ringState
	host   bool
	// mu: a reader of a host-backed map copies mem while the session may
	// be closing; unmap waits for it instead of pulling the pages away.
	// released: unmapped; a live read makes no mirror after it.
	mu       sync.RWMutex
	released bool
	// refs: batches of the ring's records in place (ringhold.go); the
	// last one released after the map unmaps the mirror
	refs atomic.Int64
	// second: a ring's second mirror, made as it is placed (the copy into
	// one while the tool scans the other; GPUBPF_RING_AHEAD=0: none)
	second *mirrorMem
	// kernel maps shared with the GPU; mirror: the device copy the GPU
	// adds to instead, folded into kmap (mirror.go)
	kmap   *ebpf.Map
	mirror *mirror
	// device-resident maps
	devAddr uint64
}

// ringState is the host side of one ring in one context.
type ringState struct {
	readers []*gpumap.Reader // one per shard
	// cur: the mirror the readers read (0: placedMap.mem, 1: its second);
	// ahead: the round trip copying into the other one, made while the
	// tool scanned (drainMu)
	cur   int
	ahead chan drainReply
	holds []*ringHold // one per shard (trace_printk's lines are copies: it never holds one)
	// The GPU's counters as of the last drain and the records the program
	// discarded, read by Stats while drains run (and after the mirror is
	// unmapped).
	produced, dropped, discarded, pending atomic.Uint64
	// budget: the trace_printk ring's count of probe calls that spent
	// their loop budget (gpumap.OffBudget), as of the last drain
	budget atomic.Uint64
	// waits, waitDrops: warps that found the ring full and waited for room
	// (Options.RingWait), and those that waited the whole bound and
	// dropped, as of the last drain
	waits, waitDrops atomic.Uint64
	// Drains so far, data bytes they copied, time spent in them, the part
	// of it the agent worked on them, the part it waited for its copies,
	// the agent still busy with the drain before when one was sent, and the
	// parts on the way to the agent and back (socket, schedulers).
	drains, copied, drainNs, opNs, waitNs, busyNs, toAgentNs, fromAgentNs atomic.Uint64
	scanNs, deliverNs                                                     atomic.Uint64 // the tool's share of a drain, after the reply
	postNs                                                                atomic.Uint64 // of busyNs: from the agent's previous reply to its next read
	failed                                                                bool          // a drain failed; logged once
	scans                                                                 []shardScan   // reused by each drain (drainMu)
	// when the ring was last drained (drainMu): a quiet ring waits while
	// a busy one beside it drains back to back
	last time.Time
	// the longest it waits for its next drain (pollInterval, printkPoll)
	maxWait time.Duration
	// when the last drain's reply came (agentproto.MonoNow), each shard's
	// reserved position then, and how long the next drain may wait
	// (drainMu); reserved and pend are a drain's scratch
	lastDrain      uint64
	lastReserved   []uint64
	next           time.Duration
	reserved, pend []uint64
}

// device returns (placing maps and compiling programs on first use) the
// session's state in context t.
func (p *Process) device(t agentproto.Target) (*device, error) {
	p.mu.Lock()
	if d := p.devs[t]; d != nil {
		p.mu.Unlock()
		return d, nil
	}
	p.mu.Unlock()
	d := &device{p: p, target: t, maps: map[string]*placedMap{}, funcs: map[string]*jit.Function{}}
	ok := false
	defer func() {
		if !ok {
			d.release()
		}
	}()
	used := map[string]bool{}
	for _, g := range p.s.gpu {
		for _, m := range verify.ReferencedMaps(g.Spec) {
			used[m] = true
		}
	}
	if lw := p.s.opts.LaunchWords; lw != "" {
		used[lw] = true // read by the agent, not by a GPU program
	}
	for _, name := range sortedKeys(used) {
		spec := p.s.spec.Maps[name]
		if spec == nil {
			return nil, fmt.Errorf("a GPU program uses map %s, which the object does not define", name)
		}
		pm, err := d.place(name, spec)
		if err != nil {
			return nil, fmt.Errorf("placing map %s on the GPU: %w", name, err)
		}
		d.maps[name] = pm
	}
	pk, err := d.ring("(printk)", gpumap.Placement{Kind: gpumap.RingBuf, RingSize: printkRingBytes})
	if err != nil {
		return nil, fmt.Errorf("placing the trace_printk ring: %w", err)
	}
	pk.ring.maxWait = quietPoll
	if p.s.prints() {
		pk.ring.maxWait = printkPoll
	}
	d.printk = pk
	placements := map[string]gpumap.Placement{}
	for n, m := range d.maps {
		placements[n] = m.place
	}
	for _, g := range p.s.gpu {
		f, err := p.s.compile(g, placements, pk.place, uint32(p.PID))
		if err != nil {
			return nil, err
		}
		d.funcs[g.Spec.Name] = f
	}
	ok = true
	p.mu.Lock()
	defer p.mu.Unlock()
	if old := p.devs[t]; old != nil { // lost a race with another module load
		ok = false
		return old, nil
	}
	p.devs[t] = d
	select {
	case p.placedNew <- struct{}{}:
	default:
	}
	return d, nil
}

// ringPlacement is pl, a ring of the program's, sized and given its wait
// bound as o asks (RingBytes, RingWait: microseconds, at most 71 minutes).
func (o Options) ringPlacement(pl gpumap.Placement) gpumap.Placement {
	pl.RingSize = o.RingBytes
	pl.WaitMicros = uint32(min(max(o.RingWait.Microseconds(), 0), math.MaxUint32))
	return pl
}

// place allocates and initialises one map in d's context.
func (d *device) place(name string, spec *ebpf.MapSpec) (*placedMap, error) {
	conn := d.p.conn
	if d.p.s.kern.shared[name] {
		km := d.p.s.kern.coll.Maps[name]
		if w, ok := d.p.s.mirrored[name]; ok {
			return d.placeMirror(name, spec, km, w)
		}
		size := pageRound(uint64(spec.MaxEntries) * gpumap.Stride(spec.ValueSize))
		r, err := conn.RegisterBPFMap(d.target, km.FD(), size)
		if err != nil {
			return nil, err
		}
		return &placedMap{name: name, spec: spec, kmap: km, region: r.RegionID, place: gpumap.Placement{
			Kind: gpumap.HostArray, Addr: r.DevAddr, HostResident: true,
			KeySize: spec.KeySize, ValueSize: spec.ValueSize, MaxEntries: spec.MaxEntries}}, nil
	}
	if pl, ok := d.p.s.hostMaps[name]; ok {
		return d.hostMap(name, spec, pl)
	}
	pl, err := gpumap.PlacementOf(spec)
	if err != nil {
		return nil, err
	}
	kind := pl.Kind
	switch kind {
	case gpumap.RingBuf:
		pm, err := d.ring(name, d.p.s.opts.ringPlacement(pl))
		if err == nil && ringAhead && !pm.place.HostData {
			d.p.secondMirror(d, pm)
		}
		return pm, err
	case gpumap.PerThreadArray:
		pl.Threads = d.p.s.opts.Threads
		if pl.Threads == 0 {
			pl.Threads = gpumap.DefaultThreads
			for pl.Threads > 1024 && gpumap.SizeOf(pl) > perThreadBudget {
				pl.Threads /= 2
			}
		}
	}
	size := gpumap.SizeOf(pl)
	addr, err := conn.Alloc(d.target, size)
	if err != nil {
		return nil, err
	}
	pl.Addr = addr
	init := gpumap.Init(pl)
	if err := conn.Write(d.target, addr, init[:gpumap.HeaderSize]); err != nil {
		conn.Free(d.target, addr)
		return nil, err
	}
	// Global data (.rodata/.data: constants, format strings) and any
	// initial contents the object declares.
	if kind == gpumap.Array {
		err := eachContent(name, spec, func(off uint64, v []byte) error { return conn.Write(d.target, addr+off, v) })
		if err != nil {
			conn.Free(d.target, addr)
			return nil, err
		}
	}
	return &placedMap{name: name, spec: spec, place: pl, devAddr: addr}, nil
}

// eachContent calls fn with the offset (from the map's header) and bytes of
// each initial value an Array map's object declares.
func eachContent(name string, spec *ebpf.MapSpec, fn func(off uint64, v []byte) error) error {
	for _, kv := range spec.Contents {
		k, kok := kv.Key.(uint32)
		v, vok := kv.Value.([]byte)
		if !kok || !vok || k >= spec.MaxEntries || len(v) > int(spec.ValueSize) {
			return fmt.Errorf("initial contents of map %s: want uint32 keys below %d and []byte values of at most %d bytes, got %T/%T", name, spec.MaxEntries, spec.ValueSize, kv.Key, kv.Value)
		}
		if err := fn(gpumap.HeaderSize+uint64(k)*gpumap.Stride(spec.ValueSize), v); err != nil {
			return err
		}
	}
	return nil
}

// planHostMaps sizes the host-backed maps (1512, 1513) the GPU programs
// use within hostMapBudget. Per-thread arrays get threads slots, or with
// threads 0 as many as let them all fit (at most gpumap.DefaultThreads and
// at least 1024, as 1502 arrays get in device memory), the same number for
// each, so one thread's slots in two maps go together. Every context gets
// this plan, so maps that cannot fit are refused when the session opens,
// before anything is attached.
func planHostMaps(spec *ebpf.CollectionSpec, gpu []GPUProgram, threads uint32) (map[string]gpumap.Placement, error) {
	used := map[string]bool{}
	for _, g := range gpu {
		for _, m := range verify.ReferencedMaps(g.Spec) {
			used[m] = true
		}
	}
	out := map[string]gpumap.Placement{}
	for _, name := range sortedKeys(used) {
		ms := spec.Maps[name]
		if ms == nil || (ms.Type != gpumap.TypePerThreadHost && ms.Type != gpumap.TypeGPUArrayHost) {
			continue
		}
		pl, err := gpumap.PlacementOf(ms)
		if err != nil {
			return nil, err
		}
		out[name] = pl
	}
	total := func(t uint32) (n uint64) {
		for name, pl := range out {
			if pl.Kind == gpumap.PerThreadArray {
				pl.Threads = t
				out[name] = pl
			}
			n += pageRound(gpumap.SizeOf(pl))
		}
		return n
	}
	t := threads
	if t == 0 {
		t = gpumap.DefaultThreads
		for t > 1024 && total(t) > hostMapBudget {
			t /= 2
		}
	}
	if total(t) > hostMapBudget {
		return nil, hostBudgetError(out)
	}
	return out, nil
}

// hostBudgetError says that the host-backed maps of plan do not fit what
// gpubpf pins, which take what, and how to make them fit.
func hostBudgetError(plan map[string]gpumap.Placement) error {
	mib := func(n uint64) uint64 { return max(1, (n+1<<19)>>20) } // nearest, a small map 1
	var sum uint64
	var parts, fixes []string
	perThread, arrays := false, false
	for _, name := range sortedKeys(plan) {
		pl := plan[name]
		size := pageRound(gpumap.SizeOf(pl))
		sum += size
		what := fmt.Sprintf("%d entries of %d bytes", pl.MaxEntries, gpumap.Stride(pl.ValueSize))
		if pl.Kind == gpumap.PerThreadArray {
			what = fmt.Sprintf("%d threads x %s", pl.Threads, what)
			perThread = true
		} else {
			arrays = true
		}
		parts = append(parts, fmt.Sprintf("%s: %s, %d MiB", name, what, mib(size)))
	}
	var types []string
	if perThread {
		fixes = append(fixes, "trace fewer threads (gpubpf run --threads N; threads past N are counted, not traced)")
		types = append(types, "BPF_MAP_TYPE_PERGPUTD_ARRAY_MAP (1502)")
	}
	if arrays {
		types = append(types, "BPF_MAP_TYPE_GPU_ARRAY_MAP (1503)")
	}
	fixes = append(fixes, "give the maps fewer entries", "keep them in device memory as "+strings.Join(types, " and "))
	return fmt.Errorf("the host-backed maps need %d MiB of pinned host memory (%s), over the %d MiB gpubpf pins in the application's RAM per GPU context: %s, or %s",
		mib(sum), strings.Join(parts, "; "), mib(hostMapBudget), strings.Join(fixes[:len(fixes)-1], ", "), fixes[len(fixes)-1])
}

// hostMap places a host-backed map (1512, 1513): header and values in a
// memfd that the tool maps and the agent registers with the driver, so the
// GPU works on host RAM and the tool reads the map in place whenever it
// likes, with no agent round trip, also after the application has gone
// (the mapping is the tool's own).
func (d *device) hostMap(name string, spec *ebpf.MapSpec, pl gpumap.Placement) (pm *placedMap, err error) {
	size := pageRound(gpumap.SizeOf(pl))
	f, mem, err := sharedMemory(name, size)
	if err != nil {
		return nil, err
	}
	pm = &placedMap{name: name, spec: spec, file: f, mem: mem, host: true}
	defer func() {
		if err != nil {
			pm.unmap()
		}
	}()
	copy(mem, gpumap.InitHeader(pl))
	if pl.Kind == gpumap.Array {
		if err := eachContent(name, spec, func(off uint64, v []byte) error { copy(mem[off:], v); return nil }); err != nil {
			return nil, err
		}
	}
	r, err := d.p.conn.RegisterMemfd(d.target, f, size, 0)
	if err != nil {
		return nil, fmt.Errorf("sharing %d MiB of host memory with the GPU: %w", size>>20, err)
	}
	pl.Addr = r.DevAddr
	pm.region, pm.place = r.RegionID, pl
	return pm, nil
}

// sharedMemory makes a memfd of size bytes named after map name and maps it
// into the tool; the agent maps the same pages into the application (and
// pins them). Mapped populated: the tool reads a ring's mirror in place,
// and a first touch per 4 KiB page in its drains cost a page fault each
// (a 256 MiB ring: 65536 of them in its first laps).
func sharedMemory(name string, size uint64) (*os.File, []byte, error) {
	fd, err := unix.MemfdCreate("gpubpf-"+name, unix.MFD_CLOEXEC)
	if err != nil {
		return nil, nil, fmt.Errorf("memfd_create: %w", err)
	}
	f := os.NewFile(uintptr(fd), "gpubpf-"+name)
	if err := f.Truncate(int64(size)); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("sizing %d MiB of host memory for map %s: %w", size>>20, name, err)
	}
	mem, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("mapping the host memory of map %s: %w", name, err)
	}
	return f, mem, nil
}

// addStats adds the ring's counters as of its last drain (nil: no ring).
func (rs *ringState) addStats(st *Stats) {
	if rs == nil {
		return
	}
	st.RecordsProduced += rs.produced.Load()
	st.RingDrops += rs.dropped.Load()
	st.LoopBudgetSpent += rs.budget.Load()
	st.RingWaits += rs.waits.Load()
	st.RingWaitDrops += rs.waitDrops.Load()
	st.RecordsDiscard += rs.discarded.Load()
	st.RingPending += rs.pending.Load()
	st.Drains += rs.drains.Load()
	st.DrainBytes += rs.copied.Load()
	st.DrainTime += time.Duration(rs.drainNs.Load())
	st.DrainWait += time.Duration(rs.waitNs.Load())
	st.DrainAgent += time.Duration(rs.opNs.Load())
	st.DrainAgentBusy += time.Duration(rs.busyNs.Load())
	st.DrainToAgent += time.Duration(rs.toAgentNs.Load())
	st.DrainFromAgent += time.Duration(rs.fromAgentNs.Load())
	st.DrainAgentPost += time.Duration(rs.postNs.Load())
	st.DrainScan += time.Duration(rs.scanNs.Load())
	st.DrainDeliver += time.Duration(rs.deliverNs.Load())
}

// ring places a ring buffer: its control block (and, unless hostDataRings,
// its data) in device memory, and a host mirror in a memfd that the agent
// copies records into (or, with host data, that the GPU writes directly).
func (d *device) ring(name string, pl gpumap.Placement) (pm *placedMap, err error) {
	pl.Kind = gpumap.RingBuf
	pl.HostData = hostDataRings
	pl.Shards = gpumap.DefaultShards(gpumap.RingSize(pl))
	if ringShards != 0 && gpumap.RingSize(pl)/uint64(ringShards) >= 4096 {
		pl.Shards = ringShards
	}
	conn := d.p.conn
	size := pageRound(gpumap.MirrorSize(pl))
	f, mem, err := sharedMemory(name, size)
	if err != nil {
		return nil, err
	}
	pm = &placedMap{name: name, file: f, mem: mem}
	defer func() {
		if err != nil {
			pm.unmap()
		}
	}()
	headers := gpumap.RingHeaders(pl)
	copy(pm.mem, headers)
	r, err := conn.RegisterMemfd(d.target, f, size, 0)
	if err != nil {
		return nil, err
	}
	pm.region = r.RegionID
	addr, err := conn.Alloc(d.target, gpumap.SizeOf(pl))
	if err != nil {
		return nil, err
	}
	if err := conn.Write(d.target, addr, headers); err != nil {
		conn.Free(d.target, addr)
		return nil, err
	}
	pl.Addr, pm.devAddr = addr, addr
	mode := gpumap.Mirror
	if pl.HostData {
		pl.Data = r.DevAddr + gpumap.RingShards(pl)*gpumap.HeaderSize
		mode = gpumap.Live
	}
	readers, err := gpumap.NewReaders(pm.mem, mode)
	if err != nil {
		return nil, err
	}
	pm.place = pl
	n := len(readers)
	pm.ring = &ringState{readers: readers, maxWait: pollInterval, lastReserved: make([]uint64, n), reserved: make([]uint64, n), pend: make([]uint64, n)}
	pm.ring.holds = make([]*ringHold, n)
	for i := range pm.ring.holds {
		pm.ring.holds[i] = &ringHold{pm: pm}
	}
	return pm, nil
}

func pageRound(n uint64) uint64 {
	const page = 4096
	if n == 0 {
		return page
	}
	return (n + page - 1) &^ (page - 1)
}

// release frees what d placed. The agent frees its side at detach (after
// the launches that may still use it finish); here the tool unmaps its own.
func (d *device) release() {
	for _, m := range d.maps {
		m.unmap()
	}
	if d.printk != nil {
		d.printk.unmap()
	}
}

func (m *placedMap) unmap() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.released = true
	if m.refs.Load() == 0 {
		m.unmapMirrors()
	}
	if m.file != nil {
		m.file.Close()
		m.file = nil
	}
	if m.second != nil && m.second.file != nil {
		m.second.file.Close()
		m.second.file = nil
	}
}

// probe returns the probe to inject for progs at one site: the compiled
// program itself, or a small .func calling each in turn when several
// programs share the site of a kernel. Its body is pasted into the kernel
// (no call: an empty program then costs no instruction at all) unless
// GPUBPF_NO_INLINE is set, which keeps plain calls (a fallback, should a
// driver ever mis-handle the pasted blocks).
func (d *device) probe(progs []GPUProgram, site string) (*instrument.Probe, error) {
	p, err := d.probeFor(progs, site)
	if p != nil && os.Getenv("GPUBPF_NO_INLINE") != "" && !d.usesKernelIndex(progs) {
		// (A probe that asks for its kernel stays inlined: the called
		// form is shared by the kernels and cannot say which it runs in.)
		p.Inline = nil
	}
	return p, err
}

// launchWords says where the agent finds the launch words for a kernel
// of a clone laid out as lay.
func (d *device) launchWords(lay instrument.LaunchLayout) agentproto.LaunchWords {
	lw := agentproto.LaunchWords{Hidden: 2, Params: uint32(lay.Params), BufOffset: uint32(lay.BufOffset)}
	if m := d.maps[d.p.s.opts.LaunchWords]; m != nil && m.region != 0 {
		lw.Region, lw.Slots = m.region, m.spec.MaxEntries
	}
	return lw
}

func (d *device) usesKernelIndex(progs []GPUProgram) bool {
	for _, g := range progs {
		if d.funcs[g.Spec.Name].UsesKernelIndex {
			return true
		}
	}
	return false
}

// ProbeOf is the probe the instrumenter pastes compiled program f in as;
// kernelIndex gives bpf_gpu_kernel_index's value in the kernel a site is in.
func ProbeOf(f *jit.Function, kernelIndex func(kernel string) uint32) *instrument.Probe {
	return &instrument.Probe{Func: f.Name, PTX: f.PTX, UsesCtx: f.UsesCtx, CtxBytes: f.CtxBytes, PTXVersion: f.PTXVersion,
		SiteTime: f.UsesSiteTime, LaunchWords: f.UsesLaunchWords, EntryTime: f.UsesEntryTime,
		Inline: func(s instrument.Site) string {
			return f.InlineAt(jit.Site{Ctx: s.Ctx, Uniq: s.Uniq, Kernel: kernelIndex(s.Kernel), Time: s.Time, Launch: s.Launch, EntryTime: s.EntryTime})
		}}
}

func (d *device) probeFor(progs []GPUProgram, site string) (*instrument.Probe, error) {
	switch len(progs) {
	case 0:
		return nil, nil
	case 1:
		// d.p.s is read at each site, as the probe is pasted in, not now
		return ProbeOf(d.funcs[progs[0].Spec.Name], func(k string) uint32 { return d.p.s.KernelIndex(k) }), nil
	}
	name := "gpubpf_" + site + "_all"
	var body, defs strings.Builder
	pr := &instrument.Probe{Func: name}
	for i, g := range progs {
		f := d.funcs[g.Spec.Name]
		defs.WriteString(f.PTX)
		defs.WriteString("\n")
		pr.UsesCtx = pr.UsesCtx || f.UsesCtx
		// One buffer serves all: as big as the furthest reader needs.
		pr.CtxBytes = max(pr.CtxBytes, f.CtxBytes)
		pr.SiteTime = pr.SiteTime || f.UsesSiteTime
		pr.LaunchWords = pr.LaunchWords || f.UsesLaunchWords
		if f.PTXVersion[0] > pr.PTXVersion[0] || f.PTXVersion[0] == pr.PTXVersion[0] && f.PTXVersion[1] > pr.PTXVersion[1] {
			pr.PTXVersion = f.PTXVersion
		}
		fmt.Fprintf(&body, "\t{\n\t.param .b64 a%d;\n\t.param .b64 r%d;\n\tst.param.b64 [a%d], %%c;\n\tcall.uni (r%d), %s, (a%d);\n\t}\n", i, i, i, i, f.Name, i)
	}
	fmt.Fprintf(&defs, ".func (.param .b64 ret) %s(.param .b64 ctx)\n{\n\t.reg .b64 %%c;\n\tld.param.b64 %%c, [ctx];\n%s\tst.param.b64 [ret], 0;\n\tret;\n}\n", name, body.String())
	pr.PTX = defs.String()
	// Pasted in, the programs run one after the other with no call at all.
	fns := make([]*jit.Function, len(progs))
	for i, g := range progs {
		fns[i] = d.funcs[g.Spec.Name]
	}
	pr.Inline = func(s instrument.Site) string {
		var b strings.Builder
		k := d.p.s.KernelIndex(s.Kernel)
		for i, f := range fns {
			b.WriteString(f.InlineAt(jit.Site{Ctx: s.Ctx, Uniq: fmt.Sprintf("%s_%d", s.Uniq, i), Kernel: k, Time: s.Time, Launch: s.Launch}))
		}
		return b.String()
	}
	return pr, nil
}
