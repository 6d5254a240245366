package runtime

import (
	"os"
	"sync"

	"github.com/gpubpf/gpubpf/pkg/runtime/agentproto"
	"github.com/gpubpf/gpubpf/pkg/runtime/gpumap"
	"golang.org/x/sys/unix"
)

// Records reach the tool in place: a batch is a run of the ring's host
// mirror, not a copy of it. Copying every record into batch memory was
// half of the tool's time on a streaming ring (H200, 2026-11-28: memmove
// 33%, zeroing fresh batches 17%, at about 60 M records/s), and held the
// drain to a tenth of what the copies over the host link carry. The price:
// the mirror under a batch must stay as it is until the tool releases the
// batch, so a drain copies only from where the scan stopped (the agent's
// copy start, protocol 11), and the GPU may write a shard's records again
// only once every batch before them was released (ringHold.freed).

// ringHold is one ring shard's records handed to the tool in place.
type ringHold struct {
	pm *placedMap
	mu sync.Mutex
	// out: the positions where the batches handed out and not released
	// yet begin, in position order; done: which of them were released
	// since (out of order); first: the sequence number of out[0]
	out   []uint64
	done  []bool
	first uint64
	// handed: every record before it was handed out (or skipped)
	handed uint64
}

// hand notes a batch beginning at position pos, handed to the tool, and
// returns its sequence number for release.
func (h *ringHold) hand(pos uint64) uint64 {
	h.pm.refs.Add(1)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.out = append(h.out, pos)
	h.done = append(h.done, false)
	return h.first + uint64(len(h.out)) - 1
}

// handedTo notes that the scan handed out every record before pos.
func (h *ringHold) handedTo(pos uint64) {
	h.mu.Lock()
	h.handed = max(h.handed, pos)
	h.mu.Unlock()
}

// release notes batch seq released by the tool.
func (h *ringHold) release(seq uint64) {
	h.mu.Lock()
	if seq >= h.first && seq-h.first < uint64(len(h.out)) {
		h.done[seq-h.first] = true
		n := 0
		for n < len(h.out) && h.done[n] {
			n++
		}
		// the rest moved to the front: the arrays' memory is reused
		// (a handful of batches are out at a time)
		h.first += uint64(n)
		k := copy(h.out, h.out[n:])
		copy(h.done, h.done[n:])
		h.out, h.done = h.out[:k], h.done[:k]
	}
	h.mu.Unlock()
	h.pm.unref()
}

// freed is the position before which the tool holds no record: the GPU
// may write there again.
func (h *ringHold) freed() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.out) > 0 {
		return h.out[0]
	}
	return h.handed
}

// unref drops a batch's hold on the mirror; the last one after the map was
// released unmaps it.
func (m *placedMap) unref() {
	if m.refs.Add(-1) != 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.released && m.refs.Load() == 0 {
		m.unmapMirrors()
	}
}

// unmapMirrors unmaps the map's memory and a ring's second mirror (m.mu
// held).
func (m *placedMap) unmapMirrors() {
	if m.mem != nil {
		unix.Munmap(m.mem)
		m.mem = nil
	}
	if m.second != nil && m.second.mem != nil {
		unix.Munmap(m.second.mem)
		m.second.mem = nil
	}
}

// mirrorMem is a ring's host mirror: memory the agent copies the device
// ring into (a memfd registered as region).
type mirrorMem struct {
	file   *os.File
	mem    []byte
	region uint64
}

// mirrors are the ring's mirrors: the first, and the second once made.
func (m *placedMap) mirrors() [2]mirrorMem {
	ms := [2]mirrorMem{{file: m.file, mem: m.mem, region: m.region}}
	if m.second != nil {
		ms[1] = *m.second
	}
	return ms
}

// secondMirror makes ring m's second mirror in d's process, as the ring is
// placed: made when the ring first streamed, the agent's pinning of it held
// the drains for tens of milliseconds just then, and a small shard filled
// (H200, 2026-11-28: tiny delivered 89.7%, small 86.6%, against 100%).
func (p *Process) secondMirror(d *device, m *placedMap) {
	size := uint64(len(m.mem))
	f, mem, err := sharedMemory(m.name+"-2", size)
	if err == nil {
		// (its control blocks are brought up to date before each copy
		// into it: drainRequest)
		var r *agentproto.RegisterHostReply
		if r, err = p.conn.RegisterMemfd(d.target, f, size, 0); err == nil {
			m.mu.Lock()
			m.second = &mirrorMem{file: f, mem: mem, region: r.RegionID}
			m.mu.Unlock()
			return
		}
		unix.Munmap(mem)
		f.Close()
	}
	p.s.logf("process %d: ring %s: no second mirror (%v): its drains copy and scan in turn", p.PID, m.name, err)
}

// inPlace keeps released in-place batches for their record bounds' memory.
var inPlace = sync.Pool{New: func() any { return &Batch{} }}

// runBatch is a batch of run r of shard hold h, in place.
func runBatch(pid, dev int, ring string, h *ringHold, r *gpumap.Run) *Batch {
	b := inPlace.Get().(*Batch)
	b.PID, b.Device, b.Map = pid, dev, ring
	b.data = r.Mem
	// the run's bounds become the batch's, the batch's spare memory the
	// reader's (copying them was a tenth of a streaming ring's scan)
	b.starts, r.Starts = r.Starts, b.starts[:0]
	b.ends, r.Ends = r.Ends, b.ends[:0]
	b.hold, b.seq = h, h.hand(r.Pos)
	return b
}

// detach returns a batch of b's records in memory of its own and releases
// b: for a holder that keeps records long (a direct run's, until every
// program ran), which would otherwise keep the ring's space from the GPU.
func (b *Batch) detach() *Batch {
	if b.hold == nil {
		return b
	}
	c := &Batch{PID: b.PID, Device: b.Device, Ctx: b.Ctx, Map: b.Map, Lines: b.Lines,
		data: append([]byte(nil), b.data...), starts: append([]uint32(nil), b.starts...), ends: append([]uint32(nil), b.ends...)}
	b.Release()
	return c
}

// releaseInPlace gives an in-place batch's records back to its ring.
func (b *Batch) releaseInPlace() {
	h, seq := b.hold, b.seq
	*b = Batch{starts: b.starts[:0], ends: b.ends[:0]}
	inPlace.Put(b)
	h.release(seq)
}
