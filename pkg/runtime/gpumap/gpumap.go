// Package gpumap defines the memory layout of every map kind a gpubpf GPU
// program can use, and the host-side readers over those bytes. The compiler
// (pkg/runtime/jit) emits PTX against these layouts; the runtime allocates
// Size bytes, writes Init's bytes, and reads results back with the readers.
//
// # Common header
//
// Every map kind except HostArray starts with a HeaderSize (256-byte) header;
// all integers are little-endian:
//
//	off  0  u32 magic "GBPF" (0x46504247)
//	off  4  u32 kind
//	off  8  u32 key size
//	off 12  u32 value size
//	off 16  u32 max entries
//	off 20  u32 slots: per-thread threads / hash capacity / ring data bytes
//	off 24  u64 errors: out-of-range thread ids (PerThreadArray), full-table
//	        inserts (Hash), dropped records (RingBuf)
//	off 32  u64 hash: number of live entries
//	off 64  u64 ring: producer position (bytes reserved, monotonic)
//	off 128 u64 ring: consumer position (written by the host)
//	off 256 data
//
// The counters sit on their own 64-byte lines so producers and the consumer
// do not share a cache line.
//
// # Array (1503, BPF_MAP_TYPE_ARRAY placed on the GPU)
//
// Values at data + key*Stride(valueSize), Stride = value size rounded up to 8
// (the kernel's elem_size), so 8-byte atomics on values are aligned.
//
// # HostArray (1504)
//
// A kernel BPF_F_MMAPABLE array: Addr is the start of its mmapped value area,
// there is NO header; value k lives at Addr + k*Stride exactly as the kernel
// lays it out. It is host-resident: atomics use .sys scope.
//
// # Host-backed arrays (1512, 1513)
//
// bpftime's BPF_MAP_TYPE_PERGPUTD_ARRAY_HOST_MAP (1512) and
// BPF_MAP_TYPE_GPU_ARRAY_HOST_MAP (1513) are the PerThreadArray and Array
// layouts, header included, in pinned host memory the GPU reaches over the
// host link. They are not kinds of their own: KindOf gives PerThreadArray
// and Array, and PlacementOf sets Placement.HostResident, which is all the
// compiler needs (system-scope atomics and fences) and leaves every reader
// (ArrayValue, PerThreadValue, a MapCopy's Values and Entries) unchanged.
// The tool keeps the memory mapped and reads it in place while the kernels
// run; a read racing with GPU writes may see a value half old, half new,
// never anything outside the map.
//
// # PerThreadArray (1502)
//
// One copy of the whole array per global thread id t (linear over the 3-D
// grid: ((ctaid.z*nctaid.y + ctaid.y)*nctaid.x + ctaid.x) * threads-per-block
// + (tid.z*ntid.y + tid.y)*ntid.x + tid.x). Value (t, k) lives at
// data + (t*maxEntries + k)*Stride. Threads with t >= slots get NULL from
// lookup, -E2BIG from update, and bump the errors counter; nothing is ever
// written out of bounds.
//
// # Hash (1501, BPF_MAP_TYPE_HASH placed on the GPU)
//
// Open addressing with linear probing over Capacity slots (a power of two,
// at least 2*maxEntries), probing at most Capacity slots. Slot i is at
// data + i*SlotSize:
//
//	off 0  u32 state: 0 empty, 1 busy (being written), 2 valid, 3 deleted
//	off 4  u32 hash (FNV-1a 32 of the key bytes)
//	off 8  key (padded to 8), then value (padded to 8)
//
// Insert claims an empty or deleted slot with a CAS on state (empty/deleted
// -> busy), writes hash, key and value, then publishes state=valid with a
// release store; lookups acquire-load the state and only look at valid
// slots. Delete CASes valid -> deleted. The live count at header+32 enforces
// maxEntries (-E2BIG and errors++ beyond). An inserter that meets a busy
// slot waits (boundedly; it waits on another GPU thread, never the host) and
// then compares keys, so concurrent inserts of one new key make one entry.
// Only an insert racing with a delete earlier in the same probe chain can
// leave a duplicate (lookups then return the first in probe order).
//
// # RingBuf (1527, BPF_MAP_TYPE_RINGBUF, BPF_MAP_TYPE_PERF_EVENT_ARRAY)
//
// Built so that a GPU thread's record costs a few device-memory stores and
// never waits for the host. The header (control block) is in device memory;
// its ring fields are
//
//	off 20  u32 S: data bytes of this shard (a power of two)
//	off 24  u64 dropped records (no room, or a record over RingTail bytes)
//	off 32  u64 records given a position (produced = this + dropped:
//	        a warp updates one of the two, not both)
//	off 40  u32 T: tail bytes (RingTail)
//	off 44  u32 shards: how many shards the ring has (0 counts as 1)
//	off 56  u32 wait bound (microseconds; 0: a full ring drops at once)
//	off 64  u64 reserved position R (bytes, monotonic)
//	off 128 u64 released position (bytes, monotonic; written by the host)
//	off 192 u64 claimed bytes
//	off 200 u64 warps that found the ring full and waited for room
//	off 208 u64 of those, the ones that waited the whole bound and dropped
//
// With a wait bound (Placement.WaitMicros, a tool's --no-drop) a warp that
// finds no room sleeps and looks again until the host has released enough
// or the bound has passed, then drops as without one: the kernel slows
// down instead of losing records, never for longer than the bound per
// record, and the host sees how often (off 200, 208).
//
// A ring is split into Shards independent shards (a power of two), each
// with its own control block and S = RingSize/Shards data bytes; a warp
// uses shard %smid mod Shards. Every counter a producer touches is then
// shared by a few SMs only: same-address atomics and loads serialise in
// L2, and with one control block for the whole GPU they were most of the
// cost of a full ring at large grids (docs/event-path.md). Memory:
//
//	Addr                      Shards control blocks of HeaderSize bytes
//	Data = Addr+Shards*256    shard i's S data bytes and T tail bytes at
//	                          Data + i*(S+T)
//
// The data area follows the control blocks in device memory, or, with
// Placement.HostData, lives in pinned host memory the GPU writes directly
// (the host mirror, laid out the same way).
// Position p is data byte p mod S; a record that starts near the end runs on
// into the T tail bytes instead of wrapping, so every record is contiguous.
// A record is an 8-byte header and its payload, padded to 8:
//
//	u32 word0: payload length, | RecValid (bit 31) | RecDiscard (bit 30)
//	           once committed
//	u32 word1: position tag, uint32(position >> 3)
//
// Both words are written with one 8-byte store at reserve (valid clear),
// then word0 gets RecValid at commit. A record is committed when its header
// has RecValid and the tag of its own position: a header left from an
// earlier lap has another tag, so consumed space needs no zeroing (the tag
// repeats only every 32 GiB of records, at the same offset).
//
// Reservation is aggregated per warp: the active lanes agree on their
// offsets (popc/shfl), and one lane claims the warp's bytes with one atomic
// add on "claimed", checked against the released position (no room: give
// the claim back, count every lane's record as dropped), then takes the
// positions with one atomic add on R. Claims never exceed S bytes beyond
// the released position, so positions are always free and hole-free.
// Commit is a release store of word0.
//
// The host drains a device ring through the agent (op ring-drain): it
// publishes each shard's new released position and copies the control
// blocks and each shard's data of [released, R) into a host mirror with the
// same layout, where a Reader per shard parses it. A copy may race with
// a record being written, so Reader only consumes records it saw committed
// in an earlier copy too (see Reader).
//
// trace_printk/bpf_puts records in the Printk ring have the payload
//
//	u32 type (1 printk, 2 puts), u32 string length, u64 arg[3], string bytes
package gpumap

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"strings"

	"github.com/cilium/ebpf"
)

// Kind is the memory layout of a map on the GPU.
type Kind int

const (
	Invalid Kind = iota
	Array
	PerThreadArray
	Hash
	RingBuf
	HostArray
)

func (k Kind) String() string {
	switch k {
	case Array:
		return "array"
	case PerThreadArray:
		return "per-thread-array"
	case Hash:
		return "hash"
	case RingBuf:
		return "ringbuf"
	case HostArray:
		return "host-array"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// bpftime's map type numbers. The host-memory ones are GPU_MAP_OFFSET 1500
// + BPF_MAP_TYPE_ARRAY 2 + 10 or 11 there.
const (
	TypeGPUHash         ebpf.MapType = 1501
	TypePerThread       ebpf.MapType = 1502
	TypeGPUArray        ebpf.MapType = 1503
	TypeSharedArray     ebpf.MapType = 1504
	TypePerThreadHost   ebpf.MapType = 1512
	TypeGPUArrayHost    ebpf.MapType = 1513
	TypeGPURingBuf      ebpf.MapType = 1527
	Magic                            = 0x46504247 // "GBPF"
	HeaderSize                       = 256
	OffMagic                         = 0
	OffKind                          = 4
	OffKeySize                       = 8
	OffValueSize                     = 12
	OffMaxEntries                    = 16
	OffSlots                         = 20
	OffErrors                        = 24
	OffCount                         = 32
	OffRecords                       = 32
	OffTail                          = 40
	OffShards                        = 44
	OffBudget                        = 48 // the trace_printk ring's first control block: see LoopBudget in package jit
	OffWaitBound                     = 56 // RingBuf: u32 microseconds a full ring is waited for (0: drop)
	OffReserved                      = 64
	OffReleased                      = 128
	OffClaimed                       = 192
	OffWaits                         = 200 // RingBuf: u64 warps that found the ring full and waited
	OffWaitDrops                     = 208 // RingBuf: u64 of those that waited the whole bound, then dropped
	RecValid                         = 1 << 31
	RecDiscard                       = 1 << 30
	RecHeader                        = 8
	HashEmpty                        = 0
	HashBusy                         = 1
	HashValid                        = 2
	HashDeleted                      = 3
	PrintkType                       = 1
	PutsType                         = 2
	PrintkPayloadHeader              = 32
	// DefaultThreads is the per-thread array capacity when Placement.Threads is 0.
	DefaultThreads = 1 << 20
	// DefaultRingBytes is the ring data size when the placement does not
	// say (bpftime's 1527 and PERF_EVENT_ARRAY count CPUs, not bytes, and a
	// kernel-sized RINGBUF fills in microseconds at one record per thread).
	DefaultRingBytes = 32 << 20
	// RingTail is the size of the tail after a ring's data area, and the
	// largest record (header included) a ring takes.
	RingTail = 64 << 10
	// MaxRingShards caps DefaultShards: 32 shards put four or five of an
	// H100's 132 SMs on each control block.
	MaxRingShards = 32
	// minShardBytes keeps a shard's data well above its RingTail.
	minShardBytes = 1 << 20
)

// Placement says where a map lives for the compiler.
type Placement struct {
	Kind Kind
	// Addr is the device-visible address of the map's memory (header first,
	// except HostArray), baked into the PTX as an immediate.
	Addr uint64
	// HostResident: the memory is host RAM (pinned/registered); atomics then
	// use .sys scope and fences.
	HostResident                   bool
	KeySize, ValueSize, MaxEntries uint32
	// Threads is the number of per-thread slots of a PerThreadArray
	// (0: DefaultThreads).
	Threads uint32
	// RingBuf only. RingSize is S, the data bytes (0: RingBytes of
	// MaxEntries). Data is the data area's device-visible address (0: right
	// after the header at Addr). HostData: the data area is pinned host
	// memory (the GPU writes it directly; commits use system-scope release).
	// Shards: how many shards the RingSize bytes are split into (a power
	// of two; 0 means 1). WaitMicros: how long a warp waits for room in a
	// full ring before it drops its records (0: drop at once).
	RingSize   uint64
	Data       uint64
	HostData   bool
	Shards     uint32
	WaitMicros uint32
}

// KindOf maps a MapSpec's type to the GPU layout it gets.
func KindOf(spec *ebpf.MapSpec) (Kind, error) {
	switch spec.Type {
	case TypeGPUArray, TypeGPUArrayHost, ebpf.Array:
		return Array, nil
	case TypePerThread, TypePerThreadHost:
		return PerThreadArray, nil
	case TypeGPUHash, ebpf.Hash:
		return Hash, nil
	case TypeGPURingBuf, ebpf.RingBuf, ebpf.PerfEventArray:
		return RingBuf, nil
	case TypeSharedArray:
		return HostArray, nil
	}
	what, use := unplaceable(spec.Type)
	return Invalid, fmt.Errorf("map %s is %s, which the GPU cannot hold: use %s", spec.Name, what, use)
}

// PlacementOf is the placement spec's map gets, all but what the runtime
// decides: the address, a per-thread array's thread count and a ring's
// size. HostResident is set for the maps that live in host memory (1504,
// 1512, 1513).
func PlacementOf(spec *ebpf.MapSpec) (Placement, error) {
	kind, err := KindOf(spec)
	if err != nil {
		return Placement{}, err
	}
	return Placement{Kind: kind, HostResident: InHostMemory(spec.Type),
		KeySize: spec.KeySize, ValueSize: spec.ValueSize, MaxEntries: spec.MaxEntries}, nil
}

// InHostMemory reports the GPU map types whose memory is host RAM the GPU
// reaches over the host link: the kernel-shared array (1504) and bpftime's
// host-backed arrays (1512, 1513).
func InHostMemory(t ebpf.MapType) bool {
	return t == TypeSharedArray || t == TypePerThreadHost || t == TypeGPUArrayHost
}

// unplaceable names a map type the GPU cannot hold, in the words of the
// program's source, and what to declare instead.
func unplaceable(t ebpf.MapType) (what, use string) {
	const usual = "BPF_MAP_TYPE_ARRAY, BPF_MAP_TYPE_HASH, BPF_MAP_TYPE_RINGBUF or a GPU map type of bpf/gpu.h (1501-1504, 1512, 1513, 1527)"
	switch t {
	case ebpf.LRUHash, ebpf.LRUCPUHash:
		return fmt.Sprintf("an LRU hash (type %d)", t),
			"BPF_MAP_TYPE_HASH or BPF_MAP_TYPE_GPU_HASH_MAP (1501); a GPU hash evicts nothing, so give it max_entries for every key (inserts into a full one are refused and counted)"
	case ebpf.PerCPUHash:
		return fmt.Sprintf("a per-CPU hash (type %d)", t),
			"BPF_MAP_TYPE_HASH (GPU threads run on no CPU), or BPF_MAP_TYPE_PERGPUTD_ARRAY_MAP (1502) for a value per GPU thread"
	case ebpf.PerCPUArray:
		return fmt.Sprintf("a per-CPU array (type %d)", t),
			"BPF_MAP_TYPE_ARRAY (GPU threads run on no CPU), or BPF_MAP_TYPE_PERGPUTD_ARRAY_MAP (1502) for a value per GPU thread"
	}
	if name := t.String(); !strings.HasPrefix(name, "MapType(") {
		return fmt.Sprintf("a %s map (type %d)", name, t), usual
	}
	return fmt.Sprintf("of map type %d", t), usual
}

// Stride is the distance between array values (value size rounded to 8).
func Stride(valueSize uint32) uint64 { return (uint64(valueSize) + 7) &^ 7 }

// HashCapacity is the slot count of a hash map.
func HashCapacity(maxEntries uint32) uint64 {
	n := uint64(maxEntries) * 2
	if n < 8 {
		n = 8
	}
	return 1 << bits.Len64(n-1)
}

// HashSlotSize is the size of one hash slot.
func HashSlotSize(keySize, valueSize uint32) uint64 { return 8 + Stride(keySize) + Stride(valueSize) }

// RingBytes is the data size of a ring buffer whose map declares
// maxEntries: the declared size when it is a power of two of at least
// DefaultRingBytes, else DefaultRingBytes (GPUs produce records far faster
// than CPUs, so a smaller declared ring is taken as a floor, not a cap).
func RingBytes(maxEntries uint32) uint64 {
	if maxEntries > DefaultRingBytes && maxEntries&(maxEntries-1) == 0 {
		return uint64(maxEntries)
	}
	return DefaultRingBytes
}

// RingSize is S, the data bytes of ring placement p.
func RingSize(p Placement) uint64 {
	if p.RingSize != 0 {
		return p.RingSize
	}
	return RingBytes(p.MaxEntries)
}

// DefaultShards is the shard count for a ring of size data bytes: up to
// MaxRingShards, each shard keeping at least 1 MiB.
func DefaultShards(size uint64) uint32 {
	n := uint32(1)
	for n < MaxRingShards && size/uint64(2*n) >= minShardBytes {
		n *= 2
	}
	return n
}

// RingShards is the shard count of ring p.
func RingShards(p Placement) uint64 {
	if p.Shards == 0 {
		return 1
	}
	return uint64(p.Shards)
}

// ShardSize is S, the data bytes of each shard of ring p.
func ShardSize(p Placement) uint64 { return RingSize(p) / RingShards(p) }

// ShardStride is the distance between two shards' data areas (S+T).
func ShardStride(p Placement) uint64 { return ShardSize(p) + RingTail }

// RingData is the device-visible address of ring p's data area (shard 0's
// data).
func RingData(p Placement) uint64 {
	if p.Data != 0 {
		return p.Data
	}
	return p.Addr + RingShards(p)*HeaderSize
}

// MirrorSize is the size of a ring's host mirror (control blocks, data,
// tails), which is also the size of a device ring allocation with its data.
func MirrorSize(p Placement) uint64 { return RingShards(p) * (HeaderSize + ShardStride(p)) }

// Slots is the header's slot count for a placement.
func Slots(p Placement) uint64 {
	switch p.Kind {
	case PerThreadArray:
		if p.Threads == 0 {
			return DefaultThreads
		}
		return uint64(p.Threads)
	case Hash:
		return HashCapacity(p.MaxEntries)
	case RingBuf:
		return ShardSize(p)
	}
	return uint64(p.MaxEntries)
}

// SizeOf is the number of bytes the runtime must allocate for p.
func SizeOf(p Placement) uint64 {
	switch p.Kind {
	case Array:
		return HeaderSize + uint64(p.MaxEntries)*Stride(p.ValueSize)
	case HostArray:
		return uint64(p.MaxEntries) * Stride(p.ValueSize)
	case PerThreadArray:
		return HeaderSize + Slots(p)*uint64(p.MaxEntries)*Stride(p.ValueSize)
	case Hash:
		return HeaderSize + HashCapacity(p.MaxEntries)*HashSlotSize(p.KeySize, p.ValueSize)
	case RingBuf:
		if p.HostData {
			return RingShards(p) * HeaderSize
		}
		return MirrorSize(p)
	}
	return 0
}

// Size is SizeOf for a placement with default thread count.
func Size(kind Kind, keySize, valueSize, maxEntries uint32) uint64 {
	return SizeOf(Placement{Kind: kind, KeySize: keySize, ValueSize: valueSize, MaxEntries: maxEntries})
}

// Init returns the initial bytes of p's memory: a filled header and zeroed
// data (zero is "empty" for hash slots and "not committed" for ring records).
// HostArray memory belongs to the kernel map and is not initialised.
func Init(p Placement) []byte {
	if p.Kind == HostArray {
		return nil
	}
	b := make([]byte, SizeOf(p))
	if p.Kind == RingBuf {
		copy(b, RingHeaders(p))
	} else {
		copy(b, InitHeader(p))
	}
	return b
}

// RingHeaders is the control blocks of ring p as Init writes them: one
// InitHeader per shard.
func RingHeaders(p Placement) []byte {
	h := InitHeader(p)
	n := RingShards(p)
	b := make([]byte, 0, n*HeaderSize)
	for range n {
		b = append(b, h...)
	}
	return b
}

// InitHeader is the first HeaderSize bytes of Init(p) (for a ring, each
// shard's control block); the rest is zero.
func InitHeader(p Placement) []byte {
	b := make([]byte, HeaderSize)
	le := binary.LittleEndian
	le.PutUint32(b[OffMagic:], Magic)
	le.PutUint32(b[OffKind:], uint32(p.Kind))
	le.PutUint32(b[OffKeySize:], p.KeySize)
	le.PutUint32(b[OffValueSize:], p.ValueSize)
	le.PutUint32(b[OffMaxEntries:], p.MaxEntries)
	le.PutUint32(b[OffSlots:], uint32(Slots(p)))
	if p.Kind == RingBuf {
		le.PutUint32(b[OffTail:], RingTail)
		le.PutUint32(b[OffShards:], uint32(RingShards(p)))
		le.PutUint32(b[OffWaitBound:], p.WaitMicros)
	}
	return b
}

// Header is the decoded common header.
type Header struct {
	Magic, Kind, KeySize, ValueSize, MaxEntries, Slots uint32
	Errors, Count                                      uint64
	// Rings: Count is the records given a position; Tail the tail bytes.
	Tail, Shards                uint32
	Reserved, Released, Claimed uint64
}

// ReadHeader decodes the header of a map snapshot.
func ReadHeader(b []byte) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, fmt.Errorf("map snapshot of %d bytes is shorter than the %d-byte header", len(b), HeaderSize)
	}
	le := binary.LittleEndian
	h := Header{
		Magic: le.Uint32(b[OffMagic:]), Kind: le.Uint32(b[OffKind:]), KeySize: le.Uint32(b[OffKeySize:]),
		ValueSize: le.Uint32(b[OffValueSize:]), MaxEntries: le.Uint32(b[OffMaxEntries:]), Slots: le.Uint32(b[OffSlots:]),
		Errors: le.Uint64(b[OffErrors:]), Count: le.Uint64(b[OffCount:]),
		Tail: le.Uint32(b[OffTail:]), Shards: le.Uint32(b[OffShards:]), Reserved: le.Uint64(b[OffReserved:]), Released: le.Uint64(b[OffReleased:]),
		Claimed: le.Uint64(b[OffClaimed:]),
	}
	if h.Magic != Magic {
		return h, fmt.Errorf("map snapshot has magic %#x, want %#x: not a gpubpf map or not initialised with gpumap.Init", h.Magic, Magic)
	}
	return h, nil
}

// ArrayValue returns value k of an Array snapshot (or HostArray bytes when
// hostArray is true).
func ArrayValue(b []byte, valueSize, k uint32, hostArray bool) ([]byte, error) {
	off := uint64(k) * Stride(valueSize)
	if !hostArray {
		off += HeaderSize
	}
	if off+uint64(valueSize) > uint64(len(b)) {
		return nil, fmt.Errorf("array value %d is past the end of a %d-byte snapshot", k, len(b))
	}
	return b[off : off+uint64(valueSize)], nil
}

// PerThreadValue returns thread t's value k of a PerThreadArray snapshot.
func PerThreadValue(b []byte, p Placement, t, k uint32) ([]byte, error) {
	if uint64(t) >= Slots(p) || k >= p.MaxEntries {
		return nil, fmt.Errorf("per-thread value (thread %d, key %d) is outside %d threads x %d entries", t, k, Slots(p), p.MaxEntries)
	}
	off := HeaderSize + (uint64(t)*uint64(p.MaxEntries)+uint64(k))*Stride(p.ValueSize)
	if off+uint64(p.ValueSize) > uint64(len(b)) {
		return nil, errors.New("per-thread array snapshot is truncated")
	}
	return b[off : off+uint64(p.ValueSize)], nil
}

// FNV1a is the hash the GPU code uses for hash-map keys.
func FNV1a(key []byte) uint32 {
	h := uint32(2166136261)
	for _, c := range key {
		h ^= uint32(c)
		h *= 16777619
	}
	return h
}

// HashEntries iterates over the valid entries of a Hash snapshot.
func HashEntries(b []byte, p Placement, fn func(key, value []byte) bool) error {
	capa := HashCapacity(p.MaxEntries)
	ss := HashSlotSize(p.KeySize, p.ValueSize)
	if uint64(len(b)) < HeaderSize+capa*ss {
		return fmt.Errorf("hash snapshot of %d bytes is shorter than %d", len(b), HeaderSize+capa*ss)
	}
	for i := uint64(0); i < capa; i++ {
		s := b[HeaderSize+i*ss:]
		if binary.LittleEndian.Uint32(s) != HashValid {
			continue
		}
		k := s[8 : 8+p.KeySize]
		v := s[8+Stride(p.KeySize) : 8+Stride(p.KeySize)+uint64(p.ValueSize)]
		if !fn(k, v) {
			return nil
		}
	}
	return nil
}

// HashLookup finds key in a Hash snapshot the same way the GPU does.
func HashLookup(b []byte, p Placement, key []byte) ([]byte, bool) {
	capa := HashCapacity(p.MaxEntries)
	ss := HashSlotSize(p.KeySize, p.ValueSize)
	h := FNV1a(key)
	for i := uint64(0); i < capa; i++ {
		off := HeaderSize + ((uint64(h)+i)&(capa-1))*ss
		if off+ss > uint64(len(b)) {
			return nil, false
		}
		s := b[off:]
		st := binary.LittleEndian.Uint32(s)
		if st == HashEmpty {
			return nil, false
		}
		if st == HashValid && binary.LittleEndian.Uint32(s[4:]) == h && string(s[8:8+len(key)]) == string(key) {
			return s[8+Stride(p.KeySize) : 8+Stride(p.KeySize)+uint64(p.ValueSize)], true
		}
	}
	return nil, false
}

// HashInsert puts key -> value into a Hash image on the host (Init's bytes,
// before the map is written to the device): what an update from the GPU
// would leave, so lookups there find it. A key already present gets the new
// value; a map holding MaxEntries keys refuses a new one.
func HashInsert(b []byte, p Placement, key, value []byte) error {
	if uint32(len(key)) != p.KeySize || uint32(len(value)) != p.ValueSize {
		return fmt.Errorf("hash entry of a %d-byte key and a %d-byte value; the map has %d-byte keys and %d-byte values", len(key), len(value), p.KeySize, p.ValueSize)
	}
	capa := HashCapacity(p.MaxEntries)
	ss := HashSlotSize(p.KeySize, p.ValueSize)
	if uint64(len(b)) < HeaderSize+capa*ss {
		return fmt.Errorf("hash image of %d bytes is shorter than %d", len(b), HeaderSize+capa*ss)
	}
	le := binary.LittleEndian
	h := FNV1a(key)
	free := int64(-1)
	for i := uint64(0); i < capa; i++ {
		off := HeaderSize + ((uint64(h)+i)&(capa-1))*ss
		s := b[off : off+ss]
		switch le.Uint32(s) {
		case HashValid:
			if le.Uint32(s[4:]) == h && string(s[8:8+len(key)]) == string(key) {
				copy(s[8+Stride(p.KeySize):], value)
				return nil
			}
			continue
		case HashDeleted:
			if free < 0 {
				free = int64(off)
			}
			continue
		}
		if free < 0 {
			free = int64(off)
		}
		break // an empty slot ends the probe chain: the key is not there
	}
	count := le.Uint64(b[OffCount:])
	if free < 0 || count >= uint64(p.MaxEntries) {
		return fmt.Errorf("the hash map is full: it holds %d entries", p.MaxEntries)
	}
	s := b[free : free+int64(ss)]
	le.PutUint32(s, HashValid)
	le.PutUint32(s[4:], h)
	copy(s[8:], key)
	copy(s[8+Stride(p.KeySize):], value)
	le.PutUint64(b[OffCount:], count+1)
	return nil
}
