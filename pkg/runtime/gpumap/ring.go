package gpumap

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"unsafe"
)

// Ring consumes a RingBuf map's records from its memory: a live host
// mapping (the GPU writes it while we read) or a snapshot.
type Ring struct {
	mem  []byte
	size uint64
}

// NewRing wraps the memory of a RingBuf map (header included). mem must be
// 8-byte aligned (mmapped/pinned memory always is).
func NewRing(mem []byte) (*Ring, error) {
	h, err := ReadHeader(mem)
	if err != nil {
		return nil, err
	}
	size := uint64(h.Slots)
	if size == 0 || size&(size-1) != 0 || uint64(len(mem)) < HeaderSize+size {
		return nil, fmt.Errorf("ring buffer header says %d data bytes but the memory holds %d", size, len(mem)-HeaderSize)
	}
	if uintptr(unsafe.Pointer(&mem[0]))%8 != 0 {
		return nil, fmt.Errorf("ring buffer memory is not 8-byte aligned")
	}
	return &Ring{mem: mem, size: size}, nil
}

func (r *Ring) u64(off uint64) *uint64 { return (*uint64)(unsafe.Pointer(&r.mem[off])) }
func (r *Ring) u32(off uint64) *uint32 { return (*uint32)(unsafe.Pointer(&r.mem[off])) }

// Drops is the number of records producers dropped for lack of room.
func (r *Ring) Drops() uint64 { return atomic.LoadUint64(r.u64(OffErrors)) }

// Poll hands every committed record, in order, to fn (the slice is only
// valid during the call), frees the space and returns how many it delivered.
// It stops at the first reserved-but-uncommitted record.
func (r *Ring) Poll(fn func(rec []byte)) int {
	n := 0
	cons := atomic.LoadUint64(r.u64(OffConsumer))
	prod := atomic.LoadUint64(r.u64(OffProducer))
	for cons < prod {
		pos := cons & (r.size - 1)
		w0 := atomic.LoadUint32(r.u32(HeaderSize + pos))
		if w0&RecValid == 0 {
			break // reserved, not committed yet
		}
		l := uint64(w0 &^ (RecValid | RecDiscard))
		total := (RecHeader + l + 7) &^ 7
		if pos+total > r.size {
			break // corrupt header; never read past the data area
		}
		if w0&RecDiscard == 0 {
			fn(r.mem[HeaderSize+pos+RecHeader : HeaderSize+pos+RecHeader+l])
			n++
		}
		// Zero the consumed bytes: a zero word0 is what tells a later
		// reader that a freshly reserved record is not committed yet.
		for i := uint64(0); i < total; i += 8 {
			atomic.StoreUint64(r.u64(HeaderSize+pos+i), 0)
		}
		cons += total
		atomic.StoreUint64(r.u64(OffConsumer), cons)
	}
	return n
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
