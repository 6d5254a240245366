package gpumap

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"unsafe"
)

// ReaderMode says how far a Reader may trust what it sees.
type ReaderMode int

const (
	// Mirror: the memory is a copy of a device ring made while kernels may
	// still be writing it (the agent's ring-drain op). A DMA copy can catch
	// a record's header committed but part of its payload not yet copied,
	// so a record is consumed only once an earlier copy, finished before
	// this one began, already showed it committed.
	Mirror ReaderMode = iota
	// Live: the memory is the ring's own data in host memory, written by
	// the GPU with ordered stores and a system-scope release at commit: a
	// committed record is complete.
	Live
	// Snapshot: a copy taken after every producer finished.
	Snapshot
)

// Reader consumes the records of one ring shard: its control block (for a
// Mirror, the copy the last drain made) and its S data and RingTail tail
// bytes. Not safe for concurrent use.
type Reader struct {
	ctl  []byte
	data []byte
	size uint64
	mode ReaderMode
	// consumed: every record before it was handed to the consumer (or
	// skipped, discarded); a drain copies from it on. What the producers
	// may write again is the consumer's to say (the drain's release).
	consumed uint64
	// verified: records ending at or before it were seen committed by an
	// earlier Scan (Mirror).
	verified uint64
	corrupt  uint64
	// a scan's record bounds, kept for the next
	starts, ends []uint32
	// a Mirror's runs of the records seen committed in its last copy,
	// not consumed yet, and how many discarded records lie among them;
	// free: their bounds' memory for reuse
	marked         []Run
	markedDiscards uint64
	free           [][]uint32
}

// NewReader wraps the memory of a one-shard ring: its control block, S
// data and tail bytes. mem must be 8-byte aligned (mmapped memory always
// is).
func NewReader(mem []byte, mode ReaderMode) (*Reader, error) {
	if len(mem) < HeaderSize {
		return nil, fmt.Errorf("ring buffer memory of %d bytes is shorter than its %d-byte control block", len(mem), HeaderSize)
	}
	return newShardReader(mem[:HeaderSize], mem[HeaderSize:], mode)
}

// NewReaders wraps the memory of a ring laid out as Placement describes
// (the shards' control blocks, then each shard's data and tail), one
// Reader per shard, in shard order. The shard count and sizes come from
// the first control block.
func NewReaders(mem []byte, mode ReaderMode) ([]*Reader, error) {
	h, err := ReadHeader(mem)
	if err != nil {
		return nil, err
	}
	n := uint64(max(h.Shards, 1))
	if n&(n-1) != 0 || n > 1<<16 {
		return nil, fmt.Errorf("ring buffer header says %d shards, not a power of two up to 65536", n)
	}
	stride := uint64(h.Slots) + RingTail
	if uint64(len(mem)) < n*(HeaderSize+stride) {
		return nil, fmt.Errorf("ring buffer of %d shards of %d data bytes needs %d bytes of memory, got %d", n, h.Slots, n*(HeaderSize+stride), len(mem))
	}
	rs := make([]*Reader, n)
	for i := range n {
		data := n*HeaderSize + i*stride
		rs[i], err = newShardReader(mem[i*HeaderSize:(i+1)*HeaderSize], mem[data:data+stride], mode)
		if err != nil {
			return nil, fmt.Errorf("ring shard %d: %w", i, err)
		}
	}
	return rs, nil
}

func newShardReader(ctl, data []byte, mode ReaderMode) (*Reader, error) {
	h, err := ReadHeader(ctl)
	if err != nil {
		return nil, err
	}
	size := uint64(h.Slots)
	if size < 8 || size&(size-1) != 0 {
		return nil, fmt.Errorf("ring buffer header says %d data bytes, not a power of two", size)
	}
	if uint64(len(data)) < size+RingTail {
		return nil, fmt.Errorf("ring buffer of %d data bytes needs %d bytes of memory with its tail, got %d", size, size+RingTail, len(data))
	}
	if uintptr(unsafe.Pointer(&ctl[0]))%8 != 0 || uintptr(unsafe.Pointer(&data[0]))%8 != 0 {
		return nil, fmt.Errorf("ring buffer memory is not 8-byte aligned")
	}
	return &Reader{ctl: ctl, data: data[:size+RingTail], size: size, mode: mode}, nil
}

// Rebase points the Readers of a ring (NewReaders' result, in shard order)
// at another copy of it, mem, with the same layout: a second mirror that
// drains take turns with (the copy into one while the tool scans the
// other). What the Readers consumed and saw committed carries over; runs
// noted in the old copy are handed out from mem.
func Rebase(rs []*Reader, mem []byte) error {
	other, err := NewReaders(mem, rs[0].mode)
	if err != nil {
		return err
	}
	if len(other) != len(rs) {
		return fmt.Errorf("ring buffer copy has %d shards, the readers %d", len(other), len(rs))
	}
	for i, o := range other {
		if o.size != rs[i].size {
			return fmt.Errorf("ring buffer copy's shard %d has %d data bytes, the reader's %d", i, o.size, rs[i].size)
		}
		rs[i].ctl, rs[i].data = o.ctl, o.data
	}
	return nil
}

func (r *Reader) u64(off uint64) *uint64 { return (*uint64)(unsafe.Pointer(&r.ctl[off])) }

// Size is S, the ring's data bytes.
func (r *Reader) Size() uint64 { return r.size }

// Consumed is the position up to which every record was handed out.
func (r *Reader) Consumed() uint64 { return r.consumed }

// Next is where the next scan's consuming stops at most: a Mirror's records
// seen committed in its last copy end there (the next scan hands them out
// from whatever copy it reads, without looking at them again).
func (r *Reader) Next() uint64 { return max(r.consumed, r.verified) }

// Pending is how many bytes reserved before reserved are not consumed yet.
func (r *Reader) Pending(reserved uint64) uint64 { return reserved - min(reserved, r.consumed) }

// Dropped and Produced are the GPU's record counters as of the header in
// mem (for a Mirror: as of the last drain). The GPU counts a warp's records
// once, where they end up (given a position, or dropped): one counter
// update per warp, on a full ring most of the cost of a record.
func (r *Reader) Dropped() uint64 { return atomic.LoadUint64(r.u64(OffErrors)) }
func (r *Reader) Produced() uint64 {
	return atomic.LoadUint64(r.u64(OffRecords)) + atomic.LoadUint64(r.u64(OffErrors))
}

// Waits is how many warps found the ring full and waited for room (a wait
// bound set: Placement.WaitMicros), and WaitDrops how many of them waited
// the whole bound and dropped their records (counted in Dropped too), as
// of the header in mem.
func (r *Reader) Waits() uint64     { return atomic.LoadUint64(r.u64(OffWaits)) }
func (r *Reader) WaitDrops() uint64 { return atomic.LoadUint64(r.u64(OffWaitDrops)) }

// BudgetSpent is, in the trace_printk ring's first shard, the probe calls
// that spent their loop budget (jit.Options.LoopBudget), as of the header
// in mem; 0 in any other ring.
func (r *Reader) BudgetSpent() uint64 { return atomic.LoadUint64(r.u64(OffBudget)) }

// Reserved is the producers' position as of the header in mem.
func (r *Reader) Reserved() uint64 { return atomic.LoadUint64(r.u64(OffReserved)) }

// Corrupt counts records whose header could not be right (a length past
// the tail or past the reserved position); the reader stops at them.
func (r *Reader) Corrupt() uint64 { return r.corrupt }

// Scan hands fn, in position order, every record of [Consumed, reserved)
// it may consume (the slice is only valid during the call), skips discarded
// ones, and returns how many it delivered and skipped. It stops at the first
// record not committed yet.
func (r *Reader) Scan(reserved uint64, fn func(rec []byte)) (delivered, discarded uint64) {
	return r.ScanRuns(reserved, 1<<20, func(run *Run) {
		for k := range run.Ends {
			fn(run.Mem[run.Starts[k]:run.Ends[k]])
		}
	})
}

// A Run is consecutive ring memory holding records Scan would deliver, for
// a consumer that takes them in bulk: record i's payload is
// Mem[Starts[i]:Ends[i]] (discarded records and headers lie between). Mem
// begins at ring position Pos (a record's header).
type Run struct {
	Mem          []byte
	Pos          uint64
	Starts, Ends []uint32
	off          uint64 // Mem's offset in the shard's data (a noted run, handed out from the copy at hand)
}

// ScanRuns is Scan in runs of at most maxRun bytes (a record longer than
// maxRun is a run of its own): fn gets each run, valid during the call. A
// run ends where the ring wraps and at a long stretch of discarded records.
// fn may keep the run's Starts and Ends if it leaves other slices in their
// place (the Reader reuses their memory): a consumer that holds records in
// place takes their bounds without copying them.
//
// A Mirror reads each record's header once: the walk over what a copy
// shows committed notes the runs (marked), and the next scan hands them
// out without reading the memory again (a committed record's bytes do not
// change until the tool releases its space; the newer copy wrote them
// there). Two walks over every record were most of the tool's time at a
// streaming ring's rates: memory traffic beside the copies' own.
func (r *Reader) ScanRuns(reserved uint64, maxRun uint64, fn func(*Run)) (delivered, discarded uint64) {
	if r.mode != Mirror {
		return r.walkRuns(reserved, maxRun, fn, false)
	}
	for i := range r.marked {
		run := &r.marked[i]
		run.Mem = r.data[run.off : run.off+uint64(len(run.Mem))]
		delivered += uint64(len(run.Ends))
		fn(run)
		r.free = append(r.free, run.Starts[:0], run.Ends[:0])
		*run = Run{}
	}
	r.marked = r.marked[:0]
	discarded, r.markedDiscards = r.markedDiscards, 0
	r.consumed = max(r.consumed, r.verified)
	r.walkRuns(reserved, maxRun, nil, true)
	return delivered, discarded
}

// walkRuns walks the committed records of [consumed, reserved): into runs
// handed to fn (consumed), or with mark into runs kept for the next scan
// (verified, a Mirror's).
func (r *Reader) walkRuns(reserved uint64, maxRun uint64, fn func(*Run), mark bool) (delivered, discarded uint64) {
	pos := r.consumed
	mask := r.size - 1
	mem := r.data
	// the run in locals, not a struct a closure shares: kept in registers
	starts, ends := r.starts[:0], r.ends[:0]
	if mark {
		starts, ends = r.bounds()
	}
	var from, to, runPos uint64 // the run's memory (offsets in mem) and position
	emit := func() {
		run := Run{Mem: mem[from:to], Pos: runPos, Starts: starts, Ends: ends, off: from}
		if mark {
			r.marked = append(r.marked, run)
			starts, ends = r.bounds()
			return
		}
		fn(&run)
		starts, ends = run.Starts[:0], run.Ends[:0]
	}
	for pos < reserved {
		off := pos & mask
		h := atomic.LoadUint64((*uint64)(unsafe.Pointer(&mem[off])))
		w0 := uint32(h)
		if w0&RecValid == 0 || uint32(h>>32) != uint32(pos>>3) {
			break // reserved, not committed yet (or a header of an earlier lap)
		}
		l := uint64(w0 &^ (RecValid | RecDiscard))
		total := (RecHeader + l + 7) &^ 7
		if total > RingTail || pos+total > reserved {
			r.corrupt++
			break // never read past the tail or into unreserved space
		}
		if w0&RecDiscard != 0 {
			discarded++
		} else {
			end := off + RecHeader + l
			if len(ends) > 0 && (off < to || off-to >= RingTail || end-from > maxRun) {
				emit() // wrapped, not adjacent (a long discarded stretch), or full
			}
			if len(ends) == 0 {
				from, runPos = off, pos
			}
			to = end
			starts = append(starts, uint32(off+RecHeader-from))
			ends = append(ends, uint32(end-from))
			delivered++
		}
		pos += total
	}
	if len(ends) > 0 {
		emit()
	}
	if mark {
		r.free = append(r.free, starts[:0], ends[:0])
		r.markedDiscards += discarded
		r.verified = pos
		return 0, 0
	}
	r.starts, r.ends = starts[:0], ends[:0] // kept for the next scan
	r.consumed = pos
	r.verified = max(r.verified, pos)
	return delivered, discarded
}

// bounds returns empty slices for a marked run's record bounds, reusing
// memory.
func (r *Reader) bounds() (starts, ends []uint32) {
	if n := len(r.free); n >= 2 {
		starts, ends = r.free[n-2], r.free[n-1]
		r.free = r.free[:n-2]
	}
	return starts, ends
}

// PrintkRecord is a decoded trace_printk/bpf_puts record.
type PrintkRecord struct {
	Type   uint32
	Format string
	Args   [3]uint64
}

// DecodePrintk decodes a record of the Printk ring.
func DecodePrintk(rec []byte) (PrintkRecord, error) {
	if len(rec) < PrintkPayloadHeader {
		return PrintkRecord{}, fmt.Errorf("printk record of %d bytes is shorter than its %d-byte header", len(rec), PrintkPayloadHeader)
	}
	le := binary.LittleEndian
	p := PrintkRecord{Type: le.Uint32(rec)}
	n := int(le.Uint32(rec[4:]))
	if n > len(rec)-PrintkPayloadHeader {
		n = len(rec) - PrintkPayloadHeader
	}
	for i := range p.Args {
		p.Args[i] = le.Uint64(rec[8+8*i:])
	}
	s := rec[PrintkPayloadHeader : PrintkPayloadHeader+n]
	if i := strings.IndexByte(string(s), 0); i >= 0 {
		s = s[:i]
	}
	p.Format = string(s)
	return p, nil
}

// String formats the record the way bpf_trace_printk would (%d %i %u %x %X
// %p %c %% with l/ll/h modifiers; %s is not supported on the GPU and prints
// the pointer).
func (p PrintkRecord) String() string {
	if p.Type == PutsType {
		return p.Format
	}
	var b strings.Builder
	f := p.Format
	ai := 0
	for i := 0; i < len(f); i++ {
		c := f[i]
		if c != '%' || i+1 >= len(f) {
			b.WriteByte(c)
			continue
		}
		j := i + 1
		long := 0
		for j < len(f) && (f[j] == 'l' || f[j] == 'h' || f[j] == 'z') {
			if f[j] == 'l' {
				long++
			}
			j++
		}
		if j >= len(f) {
			b.WriteString(f[i:])
			break
		}
		verb := f[j]
		if verb == '%' {
			b.WriteByte('%')
			i = j
			continue
		}
		var a uint64
		if ai < 3 {
			a = p.Args[ai]
		}
		ai++
		if long == 0 {
			a = uint64(uint32(a))
		}
		switch verb {
		case 'd', 'i':
			if long == 0 {
				b.WriteString(strconv.FormatInt(int64(int32(a)), 10))
			} else {
				b.WriteString(strconv.FormatInt(int64(a), 10))
			}
		case 'u':
			b.WriteString(strconv.FormatUint(a, 10))
		case 'x':
			b.WriteString(strconv.FormatUint(a, 16))
		case 'X':
			b.WriteString(strings.ToUpper(strconv.FormatUint(a, 16)))
		case 'p', 's':
			b.WriteString("0x" + strconv.FormatUint(p.Args[min(ai-1, 2)], 16))
		case 'c':
			b.WriteByte(byte(a))
		default:
			b.WriteString(f[i : j+1])
		}
		i = j
	}
	return b.String()
}
