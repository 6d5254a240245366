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
	// released: every position before it was consumed; the next drain
	// may release it to the producers.
	released uint64
	// verified: records ending at or before it were seen committed by an
	// earlier Scan (Mirror).
	verified uint64
	corrupt  uint64
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

func (r *Reader) u64(off uint64) *uint64 { return (*uint64)(unsafe.Pointer(&r.ctl[off])) }

// Size is S, the ring's data bytes.
func (r *Reader) Size() uint64 { return r.size }

// Released is the position up to which every record was consumed.
func (r *Reader) Released() uint64 { return r.released }

// Pending is how many bytes reserved before reserved are not consumed yet.
func (r *Reader) Pending(reserved uint64) uint64 { return reserved - min(reserved, r.released) }

// Ready is how many bytes of records Scan may consume now, at most: in a
// Mirror, those an earlier Scan already saw committed (the others wait for
// the next copy); else all that is pending. It sizes the consumer's buffer
// exactly instead of by Pending, about twice as much in a Mirror that
// streams.
func (r *Reader) Ready(reserved uint64) uint64 {
	if r.mode == Mirror {
		return min(r.verified, reserved) - min(r.released, r.verified, reserved)
	}
	return r.Pending(reserved)
}

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

// Scan hands fn, in position order, every record of [Released, reserved)
// it may consume (the slice is only valid during the call), skips discarded
// ones, and returns how many it delivered and skipped. It stops at the first
// record not committed yet.
func (r *Reader) Scan(reserved uint64, fn func(rec []byte)) (delivered, discarded uint64) {
	mem := r.data
	return r.walk(reserved, func(off, l uint64) { fn(mem[off+RecHeader : off+RecHeader+l]) })
}

// A Run is consecutive ring memory holding records Scan would deliver, for
// a consumer that copies them in bulk: record i's payload is
// Mem[Starts[i]:Ends[i]] (discarded records and headers lie between).
type Run struct {
	Mem          []byte
	Starts, Ends []uint32
}

// ScanRuns is Scan in runs of at most maxRun bytes (a record longer than
// maxRun is a run of its own): fn gets each run, valid during the call.
func (r *Reader) ScanRuns(reserved uint64, maxRun uint64, fn func(Run)) (delivered, discarded uint64) {
	var run Run
	var from, to uint64 // the run's memory, offsets in r.data
	flush := func() {
		if len(run.Ends) > 0 {
			run.Mem = r.data[from:to]
			fn(run)
		}
		run.Starts, run.Ends = run.Starts[:0], run.Ends[:0]
	}
	delivered, discarded = r.walk(reserved, func(off, l uint64) {
		end := off + RecHeader + l
		if len(run.Ends) > 0 && (off < to || off-to >= RingTail || end-from > maxRun) {
			flush() // wrapped, not adjacent (a long discarded stretch), or full
		}
		if len(run.Ends) == 0 {
			from = off
		}
		to = end
		run.Starts = append(run.Starts, uint32(off+RecHeader-from))
		run.Ends = append(run.Ends, uint32(end-from))
	})
	flush()
	return delivered, discarded
}

// walk is Scan's loop: deliver gets each consumable record that is not
// discarded as its header's offset in r.data and its length.
func (r *Reader) walk(reserved uint64, deliver func(off, l uint64)) (delivered, discarded uint64) {
	pos := r.released
	mask := r.size - 1
	mem := r.data
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
		end := pos + total
		if r.mode == Mirror && end > r.verified {
			// First seen committed in this copy: consume it after the
			// next copy, which starts after this one finished.
			pos = end
			continue
		}
		if w0&RecDiscard != 0 {
			discarded++
		} else {
			deliver(off, l)
			delivered++
		}
		pos = end
		r.released = end
	}
	if pos > r.verified {
		r.verified = pos
	}
	return delivered, discarded
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
