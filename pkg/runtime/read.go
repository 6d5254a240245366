package runtime

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/gpubpf/gpubpf/pkg/runtime/agentproto"
	"github.com/gpubpf/gpubpf/pkg/runtime/gpumap"
)

// pollInterval is the longest an event ring waits for its next drain;
// one that streams is drained sooner (nextDrain). printkPoll is trace_printk's:
// a line a human reads can wait, and every round trip for it while an event
// ring streams beside it was one its drains waited for (small preset: every
// other round trip). quietPoll is the trace_printk ring's when no program
// prints: it carries only the loop-budget count, an account figure; each
// drain is a round trip to the agent and driver calls in the application,
// and a hundred a second of them for nothing were a tenth of launchlate's
// CPU at 1,000 launches/s.
const (
	pollInterval = 2 * time.Millisecond
	printkPoll   = 10 * time.Millisecond
	quietPoll    = time.Second
)

// batchQueue batches may wait for the tool; batchBytes caps one batch. With
// the rings, this bounds the tool's memory: a tool that falls behind makes
// the drains wait, the device rings fill, and the GPU drops (counted).
const (
	batchQueue = 16
	batchBytes = 4 << 20
)

// poll delivers ring records to the session until the process detaches:
// back to back while a ring is more than an eighth full, else when its
// busiest shard is due to be a quarter full at the rate it filled since the
// last drain, at most pollInterval later. Drains are driver calls in the
// application's process; made without need they slow its own launches
// (measured: tiny preset x3.1 instead of x1.7 when draining back to back
// whenever a record had arrived). Waiting the whole interval while a ring
// streams let small's busy shards fill to half between drains, and a
// Mirror's record stays about two drains (H100, 2026-11-23: 90-93% delivered).
func (p *Process) poll() {
	defer p.wg.Done()
	var folded time.Time
	for {
		wait := p.drain(false)
		if p.s.folding() {
			if now := time.Now(); now.Sub(folded) >= FoldEvery {
				p.fold(true)
				folded = now
			}
			wait = min(wait, max(FoldEvery-time.Since(folded), time.Millisecond))
		}
		select {
		case <-p.stop:
			return
		case <-p.placedNew: // its rings' first drain waits no quiet second
		case <-time.After(wait):
		}
	}
}

// drain hands the committed records of every ring that is due to the
// session and says how long until the next one is. final: the process is
// going away or detaching: drain every ring until every reserved record is
// consumed (or stops coming).
func (p *Process) drain(final bool) (next time.Duration) {
	next = quietPoll
	if p.conn == nil {
		return printkPoll
	}
	p.drainMu.Lock()
	defer p.drainMu.Unlock()
	now := time.Now()
	one := func(d *device, m *placedMap) {
		rs := m.ring
		if due := rs.last.Add(rs.next); !final && now.Before(due) {
			next = min(next, due.Sub(now))
			return
		}
		rs.last = now
		p.drainRing(d, m, final)
		next = min(next, rs.next)
	}
	for _, d := range p.placed() {
		for _, name := range sortedKeys(d.maps) {
			if m := d.maps[name]; m.ring != nil {
				one(d, m)
			}
		}
		if d.printk != nil {
			one(d, d.printk)
		}
	}
	return next
}

// nextDrain is how long after a drain at now the ring's busiest shard is
// due to be a quarter full, at the rate each shard filled since the drain
// before (rs.maxWait at most; 0 while one is more than an eighth full).
func (rs *ringState) nextDrain(now uint64, reserved, pending []uint64) time.Duration {
	next := rs.maxWait
	for j, r := range rs.readers {
		if pending[j] > r.Size()/8 {
			next = 0
		}
		grew := reserved[j] - min(reserved[j], rs.lastReserved[j])
		if rs.lastDrain == 0 || now <= rs.lastDrain || grew == 0 {
			continue
		}
		room := r.Size()/4 - min(r.Size()/4, pending[j])
		next = min(next, time.Duration(float64(room)/float64(grew)*float64(now-rs.lastDrain)))
	}
	rs.lastDrain = now
	copy(rs.lastReserved, reserved)
	return next
}

// maxFinalDrains bounds a final drain: a record reserved by a kernel that
// never commits it (the application died mid-kernel) must not hang the tool.
const maxFinalDrains = 64

// drainReply is a ring-drain round trip's outcome: into which mirror, the
// agent's reply, and the tool's clock around it.
type drainReply struct {
	buf    int
	rep    agentproto.RingDrainReply
	err    error
	t0, t1 uint64
}

// roundTrip sends a ring-drain request and waits for its reply.
func (p *Process) roundTrip(d *device, req agentproto.RingDrainRequest, buf int) drainReply {
	t0 := agentproto.MonoNow()
	rep, err := p.conn.RingDrain(d.target, req)
	return drainReply{buf: buf, rep: rep, err: err, t0: t0, t1: agentproto.MonoNow()}
}

// drainRequest is the request of a drain copying into mirror buf, from the
// readers' state now. ahead: it goes out before the scan of the copy just
// finished (in the other mirror), whose noted runs are handed out from that
// copy: the new copy may start where they end. Otherwise the noted runs are
// handed out from this copy, so it starts where the scan stopped.
func (p *Process) drainRequest(d *device, m *placedMap, buf int, ahead bool) agentproto.RingDrainRequest {
	rs := m.ring
	mr := m.mirrors()[buf]
	req := agentproto.RingDrainRequest{Target: d.target, Ring: m.place.Addr, RegionID: mr.region,
		DataBytes: gpumap.ShardSize(m.place), TailBytes: gpumap.RingTail, Release: make([]uint64, len(rs.readers)),
		CopyFrom: make([]uint64, len(rs.readers))}
	if m.place.HostData {
		req.Flags |= agentproto.RingDrainHostData
	}
	if buf != rs.cur {
		// the agent checks the positions against the mirror's copy of the
		// control blocks: make it the latest
		n := uint64(len(rs.readers)) * gpumap.HeaderSize
		copy(mr.mem[:n], m.mirrors()[rs.cur].mem[:n])
	}
	for j, r := range rs.readers {
		// the GPU may write again where the tool holds no record
		req.Release[j], req.CopyFrom[j] = rs.holds[j].freed(), r.Consumed()
		if ahead {
			req.CopyFrom[j] = r.Next()
		}
	}
	return req
}

// account adds a round trip's times to the ring's.
func (p *Process) account(rs *ringState, r drainReply) {
	rep, t0, t1 := r.rep, r.t0, r.t1
	rs.drains.Add(1)
	rs.copied.Add(rep.Copied)
	rs.drainNs.Add(t1 - t0)
	rs.waitNs.Add(rep.WaitNs)
	if t0 <= rep.RecvNs && rep.RecvNs <= rep.SentNs && rep.SentNs <= t1 {
		// one clock on both sides: the agent's whole share, and
		// what is left, the socket's and the schedulers'
		rs.opNs.Add(rep.SentNs - rep.RecvNs)
		sent := t0
		if t0 < rep.ReadyNs && rep.ReadyNs <= rep.RecvNs {
			// the agent was still finishing the request before
			sent = rep.ReadyNs
			rs.busyNs.Add(rep.ReadyNs - t0)
			if p.lastSent != 0 && p.lastSent < rep.ReadyNs {
				// ...for how long after it had sent its reply
				rs.postNs.Add(rep.ReadyNs - p.lastSent)
			}
		}
		p.lastSent = rep.SentNs
		rs.toAgentNs.Add(rep.RecvNs - sent)
		rs.fromAgentNs.Add(t1 - rep.SentNs)
	} else {
		rs.opNs.Add(rep.OpNs)
	}
}

// ringAhead: a streaming ring's drains copy into one mirror while the tool
// scans the other, a second mirror as large as the first made as the ring
// is placed (GPUBPF_RING_AHEAD=0: one mirror, copy and scan in turn).
// Measured (H200, 2026-11-28, vec_add medium streaming, 256 MiB ring, same
// call, two runs each): 270-287 M records/s delivered, 0.8-1.0% dropped,
// against 234-238 M/s and 33% dropped with one mirror; event-bench's short
// runs delivered the same share either way (tiny and small 100%). Made
// when the ring first streamed instead, the agent's pinning of it held
// the drains just then (tiny delivered 89.7%, small 86.6%).
var ringAhead = os.Getenv("GPUBPF_RING_AHEAD") != "0"

func (p *Process) drainRing(d *device, m *placedMap, final bool) {
	rs := m.ring
	dev := int(d.target.Device)
	printk := m == d.printk
	stalled := 0
	for i := 0; i < maxFinalDrains; i++ {
		var r drainReply
		if rs.ahead != nil {
			r = <-rs.ahead // made during the last scan
			rs.ahead = nil
		} else {
			r = p.roundTrip(d, p.drainRequest(d, m, rs.cur, false), rs.cur)
		}
		p.account(rs, r)
		if r.err != nil {
			if !rs.failed {
				rs.failed = true
				p.s.logf("process %d: draining ring %s on GPU %d: %v", p.PID, m.name, dev, r.err)
			}
			rs.next = rs.maxWait
			return
		}
		rs.failed = false
		if r.buf != rs.cur {
			if err := gpumap.Rebase(rs.readers, m.mirrors()[r.buf].mem); err != nil {
				p.s.logf("process %d: ring %s: %v", p.PID, m.name, err) // cannot be: the same layout
				rs.next = rs.maxWait
				return
			}
			rs.cur = r.buf
		}
		var delivered, discarded, pending, produced, dropped, budget, waits, waitDrops uint64
		streaming := false
		work := rs.scans[:0]
		for j, r := range rs.readers {
			reserved := r.Reserved()
			rs.reserved[j], rs.pend[j] = reserved, 0
			produced += r.Produced()
			dropped += r.Dropped()
			budget += r.BudgetSpent()
			waits, waitDrops = waits+r.Waits(), waitDrops+r.WaitDrops()
			// Scan also when nothing is ready: it marks what this copy
			// shows committed, for the next drain to consume
			if pend := r.Pending(reserved); pend > 0 {
				work = append(work, shardScan{r: r, hold: rs.holds[j], shard: j, reserved: reserved})
				streaming = streaming || pend > r.Size()/8
			}
		}
		if streaming && !final && m.second != nil {
			// the next copy, into the other mirror, while this one is
			// scanned: a ring more than an eighth full drains back to
			// back anyway
			ch, buf := make(chan drainReply, 1), 1-rs.cur
			req := p.drainRequest(d, m, buf, true) // before the scan moves the readers on
			go func() { ch <- p.roundTrip(d, req, buf) }()
			rs.ahead = ch
		}
		t2 := agentproto.MonoNow()
		scanShards(work, p.PID, dev, m.name, printk)
		t3 := agentproto.MonoNow()
		rs.scanNs.Add(t3 - t2)
		for i := range work {
			w := &work[i]
			for _, b := range w.batches {
				b.Ctx = d.target.Ctx
				p.s.deliver(b)
			}
			delivered, discarded = delivered+w.n, discarded+w.x
			// shards left out of work had nothing pending
			rs.pend[w.shard] = w.r.Pending(w.reserved)
			pending += rs.pend[w.shard]
			*w = shardScan{} // the batches are the tool's now
		}
		rs.scans = work
		t4 := agentproto.MonoNow()
		rs.deliverNs.Add(t4 - t3)
		rs.next = rs.nextDrain(r.t1, rs.reserved, rs.pend)
		if rs.ahead != nil {
			rs.next = 0 // its copy is on its way
		}
		if drainTrace {
			// one line per drain, times in microseconds (a measurement
			// switch: where a streaming ring's drain cycle goes)
			fmt.Fprintf(os.Stderr, "gpubpf: drain pid=%d ring=%s t=%d rtt=%d scan=%d deliver=%d copied=%d produced=%d dropped=%d consumed=%d pending=%d next=%d\n",
				p.PID, m.name, r.t0/1000, (r.t1-r.t0)/1000, (t3-t2)/1000, (t4-t3)/1000, r.rep.Copied, produced, dropped, delivered+discarded, pending, rs.next.Microseconds())
		}
		rs.discarded.Add(discarded)
		rs.produced.Store(produced)
		rs.dropped.Store(dropped)
		rs.budget.Store(budget)
		rs.waits.Store(waits)
		rs.waitDrops.Store(waitDrops)
		rs.pending.Store(pending)
		if !final || (pending == 0 && rs.ahead == nil) {
			return
		}
		if delivered+discarded == 0 {
			if stalled++; stalled > 2 {
				time.Sleep(time.Millisecond) // a kernel may still be committing
			}
			if stalled > 8 {
				return
			}
		} else {
			stalled = 0
		}
	}
}

// shardScan is one shard's part of a drain: what its Scan found.
type shardScan struct {
	r        *gpumap.Reader
	hold     *ringHold // the shard's records the tool holds
	shard    int
	reserved uint64
	batches  []*Batch
	n, x     uint64 // records delivered, discarded
}

// scanParallelMin: below this many bytes pending in all shards together, one
// goroutine scans them (starting goroutines would cost more).
const scanParallelMin = 256 << 10

// scanShards scans the shards in work into batches, several at a time: a
// streaming ring has every shard full of records, and one core copying
// them into batches (about 10 ns a record) was measured to hold the drain
// loop to about a quarter of the small preset's 64 M records a second
// (H100, 2026-11-23). Each Reader is used by one goroutine only; the
// batches wait in work until the caller delivers them in shard order, so
// a drain holds at most the ring's size of records.
func scanShards(work []shardScan, pid, dev int, ring string, printk bool) {
	total := uint64(0)
	for i := range work {
		total += work[i].r.Pending(work[i].reserved)
	}
	if len(work) < 2 || total < scanParallelMin {
		for i := range work {
			scanShard(&work[i], pid, dev, ring, printk)
		}
		return
	}
	next := atomic.Int64{}
	var wg sync.WaitGroup
	for range min(len(work), scanThreads) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < len(work); i = int(next.Add(1) - 1) {
				scanShard(&work[i], pid, dev, ring, printk)
			}
		}()
	}
	wg.Wait()
}

// drainTrace: GPUBPF_DRAIN_TRACE=1 prints a line per drain to stderr.
var drainTrace = os.Getenv("GPUBPF_DRAIN_TRACE") != ""

// scanThreads is how many goroutines scan a drain's shards at once: half
// the machine's CPUs, at most 8. Every CPU scanning (GOMAXPROCS) would also
// take them from the traced application's launching thread and from the
// agent's thread that serves the next drain; on a streaming ring the scan
// reads the mirror at memory speed, and 8 goroutines delivered 1.5x what 4
// did (H200, 2026-11-28, 256 MiB ring). GPUBPF_SCAN_THREADS=N sets it.
var scanThreads = func() int {
	if n, err := strconv.Atoi(os.Getenv("GPUBPF_SCAN_THREADS")); err == nil && n > 0 {
		return n
	}
	return max(1, min(goruntime.GOMAXPROCS(0)/2, 8))
}()

// scanShard consumes what one shard has ready: trace_printk's lines into
// one batch of text, records into batches of their runs in the mirror (at
// most batchBytes each), in place.
func scanShard(w *shardScan, pid, dev int, ring string, printk bool) {
	defer func() { w.hold.handedTo(w.r.Consumed()) }()
	if printk {
		b := &Batch{PID: pid, Device: dev} // lines only: no record memory
		w.n, w.x = w.r.Scan(w.reserved, func(rec []byte) {
			pr, err := gpumap.DecodePrintk(rec)
			text := pr.String()
			if err != nil {
				text = fmt.Sprintf("<bad trace_printk record: %v>", err)
			}
			b.Lines = append(b.Lines, text)
		})
		w.batches = append(w.batches, b)
		return
	}
	w.n, w.x = w.r.ScanRuns(w.reserved, batchBytes, func(r *gpumap.Run) {
		w.batches = append(w.batches, runBatch(pid, dev, ring, w.hold, r))
	})
}

// deliver queues a batch for the tool. It waits while the tool catches up
// (the rings then fill and the GPU counts drops): memory stays bounded and
// nothing is lost unaccounted. With no reader at all, batches are counted
// as lost instead.
func (s *Session) deliver(b *Batch) {
	if b.Len() == 0 && len(b.Lines) == 0 {
		return
	}
	if s.sink != nil { // a direct run: what its kernel produced, in order
		s.mu.Lock()
		s.stats.Records += uint64(b.Len())
		s.stats.PrintkLines += uint64(len(b.Lines))
		s.mu.Unlock()
		// kept until every program ran: a copy, so that the next
		// program's kernel has the whole ring
		s.sink(b.detach())
		return
	}
	s.sendMu.RLock()
	defer s.sendMu.RUnlock()
	if s.sendClosed || !s.consumed.Load() {
		s.mu.Lock()
		s.stats.RecordsLost += uint64(b.Len() + len(b.Lines))
		s.mu.Unlock()
		b.Release()
		return
	}
	s.mu.Lock()
	s.stats.Records += uint64(b.Len())
	s.stats.PrintkLines += uint64(len(b.Lines))
	s.mu.Unlock()
	s.batches <- b
}

// MapCopy is one map's contents as read from one place it lives.
type MapCopy struct {
	Name   string
	Spec   *ebpf.MapSpec
	PID    int // 0 for maps that live only in the kernel
	Device int
	// Ctx is non-zero for a copy in a context the application created
	// itself (cuCtxCreate) beside its device's primary one: the driver
	// gives that context's kernels no access to the other's memory, so each
	// has its copy, and a reader adds them up (as it does devices). Every
	// module loaded in a device's primary context (cudart's: the
	// executable's and its libraries' kernels, PTX and cubins loaded at run
	// time) shares one copy, Ctx 0.
	Ctx   uint64
	Kind  gpumap.Kind // Invalid for kernel maps
	Place gpumap.Placement
	// Data is the map's memory (header included) for GPU maps; nil for
	// kernel maps, which are read through Kernel.
	Data   []byte
	Kernel *ebpf.Map
	// Errors is the map's GPU-side error counter (out-of-range thread ids,
	// full hash, dropped records).
	Errors uint64
}

// ReadMaps copies every map of the session: GPU maps from every process and
// context they were placed in (device memory read through the agent after
// the instrumented launches the application has issued so far, host-backed
// maps straight from the tool's own mapping), and the kernel maps. Ring
// buffers are not included (their records arrive on Records). With names,
// only those maps are read.
func (s *Session) ReadMaps(names ...string) ([]MapCopy, error) {
	return s.readMaps(false, names)
}

// ReadMapsLive is ReadMaps for tables that kernels fill while the
// application runs: a map in device memory is copied as it is now, into a
// host mirror by the GPU's copy engine, without waiting for the launches
// the application has queued (a read that waits holds the reader up behind
// them, and records the application's deferred launch events). As with a
// host-backed map, a value a kernel is writing can come out torn: the tool
// checks what it reads (reads twice, takes what agrees).
func (s *Session) ReadMapsLive(names ...string) ([]MapCopy, error) {
	return s.readMaps(true, names)
}

func (s *Session) readMaps(live bool, names []string) ([]MapCopy, error) {
	var out []MapCopy
	var firstErr error
	want := func(name string) bool { return len(names) == 0 || slices.Contains(names, name) }
	for _, p := range s.Processes() {
		p.refreshSanitizer(false) // the kernel indexes the maps count by, named
		p.deviceMaps(func(d *device, m *placedMap) {
			if !want(m.name) {
				return
			}
			data, err := p.readMap(d, m, live)
			if errors.Is(err, errDetached) {
				return // the session let the process go as we read
			}
			if err != nil {
				if firstErr == nil {
					firstErr = fmt.Errorf("process %d: reading map %s: %w", p.PID, m.name, err)
				}
				return
			}
			mc := MapCopy{Name: m.name, Spec: m.spec, PID: p.PID, Device: int(d.target.Device), Ctx: d.target.Ctx, Kind: m.place.Kind, Place: m.place, Data: data}
			if h, err := gpumap.ReadHeader(data); err == nil {
				mc.Errors = h.Errors
			}
			out = append(out, mc)
		})
	}
	if s.kern.coll != nil {
		// the GPU's adds gathered in device memory, added to the kernel's
		// maps before they are read (only where one is asked for: a tool
		// reads its own maps here many times a second)
		for name := range s.mirrored {
			if want(name) {
				for _, p := range s.Processes() {
					p.fold(live)
				}
				break
			}
		}
		for _, name := range sortedKeys(s.kern.coll.Maps) {
			if !want(name) {
				continue
			}
			out = append(out, MapCopy{Name: name, Spec: s.spec.Maps[name], Kernel: s.kern.coll.Maps[name]})
		}
	}
	return out, firstErr
}

// Values is the value area of a GPU array or per-thread array copy (the
// bytes after the map's header); nil for other kinds.
func (mc MapCopy) Values() []byte {
	if (mc.Kind != gpumap.Array && mc.Kind != gpumap.PerThreadArray) || len(mc.Data) < gpumap.HeaderSize {
		return nil
	}
	return mc.Data[gpumap.HeaderSize:]
}

// readDevice reads device memory in chunks the protocol allows.
func (p *Process) readDevice(t agentproto.Target, addr, size uint64) ([]byte, error) {
	const chunk = 16 << 20
	out := make([]byte, 0, size)
	for off := uint64(0); off < size; off += chunk {
		n := size - off
		if n > chunk {
			n = chunk
		}
		b, err := p.conn.Read(t, addr+off, uint32(n))
		if err != nil {
			return nil, err
		}
		out = append(out, b...)
	}
	return out, nil
}

// Entries calls fn for every entry of the map copy: array indexes as 4-byte
// keys, hash entries, per-thread arrays as (thread, key) pairs whose value
// is not all zero (thread in the high 32 bits of the 8-byte key).
func (mc MapCopy) Entries(fn func(key, value []byte) bool) error {
	if mc.Kernel != nil {
		var k, v []byte
		it := mc.Kernel.Iterate()
		for it.Next(&k, &v) {
			if !fn(k, v) {
				return nil
			}
		}
		return it.Err()
	}
	switch mc.Kind {
	case gpumap.Array:
		for i := uint32(0); i < mc.Place.MaxEntries; i++ {
			v, err := gpumap.ArrayValue(mc.Data, mc.Place.ValueSize, i, false)
			if err != nil {
				return err
			}
			if !fn(binary.LittleEndian.AppendUint32(nil, i), v) {
				return nil
			}
		}
	case gpumap.Hash:
		return gpumap.HashEntries(mc.Data, mc.Place, fn)
	case gpumap.PerThreadArray:
		slots := gpumap.Slots(mc.Place)
		for t := uint64(0); t < slots; t++ {
			for k := uint32(0); k < mc.Place.MaxEntries; k++ {
				v, err := gpumap.PerThreadValue(mc.Data, mc.Place, uint32(t), k)
				if err != nil {
					return err
				}
				if allZero(v) {
					continue
				}
				key := binary.LittleEndian.AppendUint32(nil, k)
				key = binary.LittleEndian.AppendUint32(key, uint32(t))
				if !fn(key, v) {
					return nil
				}
			}
		}
	}
	return nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// readMap reads a GPU map: a host-backed one from the tool's mapping; one
// in device memory through the agent (live: as it is now, see
// ReadMapsLive), or, once the application has gone, the copy taken at its
// last module unload.
func (p *Process) readMap(d *device, m *placedMap, live bool) ([]byte, error) {
	if m.host {
		return m.readHost()
	}
	select {
	case <-p.conn.Done():
	default:
		var data []byte
		var err error
		if live {
			data, err = p.readLive(d, m)
		} else {
			data, err = p.readDevice(d.target, m.devAddr, gpumap.SizeOf(m.place))
		}
		if err == nil {
			return data, nil
		}
		if b := p.finalCopy(d.target, m.name); b != nil {
			return b, nil
		}
		if processExited(p.PID) { // before the connection said so
			return nil, errExitedBeforeRead
		}
		return nil, err
	}
	if b := p.finalCopy(d.target, m.name); b != nil {
		return b, nil
	}
	return nil, errExitedBeforeRead
}

var errExitedBeforeRead = errors.New("the process exited before its maps could be read")

// errDetached: the map was released with its process (Detach, Close).
var errDetached = errors.New("the map was released when the session detached from its process")

// readHost copies a host-backed map from the tool's own mapping of it: no
// agent round trip, and the mapping outlives the application. The GPU may
// be writing as it copies, with nothing to order the two: a value can come
// out torn (part old, part new), but the copy never reads outside the map.
func (m *placedMap) readHost() ([]byte, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.mem == nil {
		return nil, errDetached
	}
	return slices.Clone(m.mem[:gpumap.SizeOf(m.place)]), nil
}

// readLive snapshots a device-resident map into its live mirror (made on
// the first live read: a memfd the agent registers) without waiting for
// the application's launches, and copies it out.
func (p *Process) readLive(d *device, m *placedMap) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	size := gpumap.SizeOf(m.place)
	if m.mem == nil {
		if m.released {
			return nil, errDetached
		}
		f, mem, err := sharedMemory(m.name+"-live", pageRound(size))
		if err != nil {
			return nil, err
		}
		r, err := p.conn.RegisterMemfd(d.target, f, pageRound(size), 0)
		if err != nil {
			unix.Munmap(mem)
			f.Close()
			return nil, fmt.Errorf("sharing a %d KiB host mirror with the agent: %w", size>>10, err)
		}
		m.file, m.mem, m.region = f, mem, r.RegionID
	}
	if err := p.conn.Snapshot(d.target, m.devAddr, m.region, 0, size, agentproto.SnapshotLive); err != nil {
		return nil, err
	}
	return slices.Clone(m.mem[:size]), nil
}

func (p *Process) finalCopy(t agentproto.Target, name string) []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.final[t][name]
}

// lastLook runs while the application waits in a module unload or at
// exit: drain the rings, copy every device map and the launch counts, so
// the tool can report them after the process is gone. It can run several
// times (every unload, then exit); a read that fails because the
// application has already torn its contexts down keeps the copy an
// earlier look took.
func (p *Process) lastLook() {
	p.drain(true)
	p.fold(false)
	if err := p.readKernelTimes(true); err != nil {
		p.s.logf("%v", err)
	}
	if p.s.opts.Clocks {
		for _, d := range p.placed() {
			if _, err := p.calibrate(d, clockRounds); err != nil {
				p.s.logf("%v", err)
			}
		}
	}
	type copied struct {
		t    agentproto.Target
		name string
		data []byte
	}
	var got []copied
	p.deviceMaps(func(d *device, m *placedMap) {
		if m.host {
			return // the tool's mapping outlives the process
		}
		if data, err := p.readDevice(d.target, m.devAddr, gpumap.SizeOf(m.place)); err == nil {
			got = append(got, copied{d.target, m.name, data})
		} else if p.finalCopy(d.target, m.name) == nil {
			p.s.logf("process %d: last read of map %s: %v", p.PID, m.name, err)
		}
	})
	p.refreshLaunches()
	p.refreshSanitizer(false)
	p.refreshGraphs()
	if err := p.readGraphStamps(); err != nil {
		p.s.logf("%v", err)
	}
	p.mu.Lock()
	if p.final == nil {
		p.final = map[agentproto.Target]map[string][]byte{}
	}
	for _, c := range got {
		if p.final[c.t] == nil {
			p.final[c.t] = map[string][]byte{}
		}
		p.final[c.t][c.name] = c.data
	}
	p.mu.Unlock()
}

// placed returns the contexts the session has placed maps in.
func (p *Process) placed() []*device {
	p.mu.Lock()
	defer p.mu.Unlock()
	devs := make([]*device, 0, len(p.devs))
	for _, d := range p.devs {
		devs = append(devs, d)
	}
	return devs
}

// deviceMaps calls fn for every GPU map of p (in device memory or
// host-backed) worth reading back: not rings (their records arrive on
// Records), not kernel maps (read through the kernel), not constants
// (.rodata).
func (p *Process) deviceMaps(fn func(d *device, m *placedMap)) {
	for _, d := range p.placed() {
		for _, name := range sortedKeys(d.maps) {
			m := d.maps[name]
			if m.ring != nil || m.kmap != nil || strings.HasPrefix(name, ".rodata") {
				continue
			}
			fn(d, m)
		}
	}
}
