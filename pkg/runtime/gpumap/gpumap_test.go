package gpumap

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
)

func TestKindOf(t *testing.T) {
	for typ, want := range map[ebpf.MapType]Kind{
		1501: Hash, 1502: PerThreadArray, 1503: Array, 1504: HostArray, 1527: RingBuf,
		1512: PerThreadArray, 1513: Array,
		ebpf.Array: Array, ebpf.Hash: Hash, ebpf.RingBuf: RingBuf, ebpf.PerfEventArray: RingBuf,
	} {
		got, err := KindOf(&ebpf.MapSpec{Name: "m", Type: typ})
		if err != nil || got != want {
			t.Errorf("KindOf(%v) = %v, %v; want %v", typ, got, err, want)
		}
	}
	// Refused with the map's name, its type and what to declare instead.
	for typ, want := range map[ebpf.MapType][]string{
		ebpf.LRUHash:     {"map m is an LRU hash (type 9)", "use BPF_MAP_TYPE_HASH or BPF_MAP_TYPE_GPU_HASH_MAP (1501)"},
		ebpf.PerCPUArray: {"a per-CPU array (type 6)", "use BPF_MAP_TYPE_ARRAY"},
		ebpf.StackTrace:  {"a StackTrace map (type 7)", "use BPF_MAP_TYPE_ARRAY, BPF_MAP_TYPE_HASH"},
		1600:             {"map m is of map type 1600", "use BPF_MAP_TYPE_ARRAY"},
	} {
		_, err := KindOf(&ebpf.MapSpec{Name: "m", Type: typ})
		if err == nil {
			t.Errorf("type %d accepted", typ)
			continue
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("type %d: %q does not say %q", typ, err, w)
			}
		}
		if strings.Contains(err.Error(), "MapType(") {
			t.Errorf("type %d: %q names a Go type", typ, err)
		}
	}
}

// bpftime's host-memory arrays are the device layouts with HostResident
// set; the other GPU maps are not host-resident, except the kernel-shared
// array.
func TestPlacementOf(t *testing.T) {
	for typ, want := range map[ebpf.MapType]Placement{
		1512: {Kind: PerThreadArray, HostResident: true, KeySize: 4, ValueSize: 24, MaxEntries: 3},
		1513: {Kind: Array, HostResident: true, KeySize: 4, ValueSize: 24, MaxEntries: 3},
		1502: {Kind: PerThreadArray, KeySize: 4, ValueSize: 24, MaxEntries: 3},
		1503: {Kind: Array, KeySize: 4, ValueSize: 24, MaxEntries: 3},
		1504: {Kind: HostArray, HostResident: true, KeySize: 4, ValueSize: 24, MaxEntries: 3},
	} {
		got, err := PlacementOf(&ebpf.MapSpec{Name: "m", Type: typ, KeySize: 4, ValueSize: 24, MaxEntries: 3})
		if err != nil || got != want {
			t.Errorf("PlacementOf(type %d) = %+v, %v; want %+v", typ, got, err, want)
		}
	}
	if _, err := PlacementOf(&ebpf.MapSpec{Name: "m", Type: ebpf.LRUHash}); err == nil {
		t.Error("PlacementOf accepted an LRU hash")
	}
	// Same header and value offsets as in device memory: readers need not
	// know where the bytes came from.
	p := Placement{Kind: PerThreadArray, HostResident: true, ValueSize: 8, MaxEntries: 3, Threads: 4}
	mem := Init(p)
	binary.LittleEndian.PutUint64(mem[HeaderSize+(2*3+1)*8:], 99)
	if v, err := PerThreadValue(mem, p, 2, 1); err != nil || binary.LittleEndian.Uint64(v) != 99 {
		t.Errorf("thread 2 key 1 = %v, %v", v, err)
	}
	if h, err := ReadHeader(mem); err != nil || h.Kind != uint32(PerThreadArray) || h.Slots != 4 {
		t.Errorf("header %+v, %v", h, err)
	}
}

func TestSizes(t *testing.T) {
	if got := Size(Array, 4, 12, 10); got != HeaderSize+10*16 {
		t.Errorf("array size %d", got)
	}
	if got := SizeOf(Placement{Kind: PerThreadArray, ValueSize: 8, MaxEntries: 2, Threads: 100}); got != HeaderSize+100*2*8 {
		t.Errorf("per-thread size %d", got)
	}
	if got := HashCapacity(100); got != 256 {
		t.Errorf("hash capacity %d", got)
	}
	if got := Size(RingBuf, 0, 0, 1<<26); got != HeaderSize+1<<26+RingTail {
		t.Errorf("ring size %d", got)
	}
	for _, small := range []uint32{16, 1 << 16, 3 << 20} {
		if got := Size(RingBuf, 0, 0, small); got != HeaderSize+DefaultRingBytes+RingTail {
			t.Errorf("ring size for max_entries %d: %d", small, got)
		}
	}
	if got := SizeOf(Placement{Kind: RingBuf, RingSize: 4096, HostData: true}); got != HeaderSize {
		t.Errorf("host-data ring control block size %d", got)
	}
	h, err := ReadHeader(Init(Placement{Kind: Hash, KeySize: 8, ValueSize: 4, MaxEntries: 3}))
	if err != nil || h.Kind != uint32(Hash) || h.Slots != 8 || h.KeySize != 8 {
		t.Errorf("header %+v, %v", h, err)
	}
}

func TestPrintk(t *testing.T) {
	rec := make([]byte, PrintkPayloadHeader)
	le := binary.LittleEndian
	le.PutUint32(rec, PrintkType)
	f := "n=%d u=%u x=%x ll=%lld %%\n\x00"
	le.PutUint32(rec[4:], uint32(len(f)))
	le.PutUint64(rec[8:], uint64(0xffffffff)) // -1 as %d
	le.PutUint64(rec[16:], 7)
	le.PutUint64(rec[24:], 255)
	rec = append(rec, f...)
	p, err := DecodePrintk(rec)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := p.String(), "n=-1 u=7 x=ff ll=0 %\n"; got != want {
		t.Fatalf("printk %q, want %q", got, want)
	}
}

func TestHashLookup(t *testing.T) {
	p := Placement{Kind: Hash, KeySize: 4, ValueSize: 8, MaxEntries: 4}
	mem := Init(p)
	key := []byte{1, 2, 3, 4}
	h := FNV1a(key)
	capa := HashCapacity(4)
	ss := HashSlotSize(4, 8)
	// Occupy the key's home slot with another key: the lookup must probe on.
	home := HeaderSize + (uint64(h)&(capa-1))*ss
	binary.LittleEndian.PutUint32(mem[home:], HashValid)
	binary.LittleEndian.PutUint32(mem[home+4:], h)
	copy(mem[home+8:], []byte{9, 9, 9, 9})
	next := HeaderSize + ((uint64(h)+1)&(capa-1))*ss
	binary.LittleEndian.PutUint32(mem[next:], HashValid)
	binary.LittleEndian.PutUint32(mem[next+4:], h)
	copy(mem[next+8:], key)
	binary.LittleEndian.PutUint64(mem[next+16:], 77)
	v, ok := HashLookup(mem, p, key)
	if !ok || binary.LittleEndian.Uint64(v) != 77 {
		t.Fatalf("lookup = %v, %v", v, ok)
	}
	n := 0
	HashEntries(mem, p, func(k, v []byte) bool { n++; return true })
	if n != 2 {
		t.Fatalf("%d entries, want 2", n)
	}
	if FNV1a([]byte("a")) != 0xe40c292c {
		t.Fatalf("FNV-1a of \"a\" = %#x", FNV1a([]byte("a")))
	}
}

// Entries put in on the host are what the GPU's lookups (HashLookup does
// the same probing) find.
func TestHashInsert(t *testing.T) {
	p := Placement{Kind: Hash, KeySize: 4, ValueSize: 8, MaxEntries: 5}
	b := Init(p)
	key := func(k uint32) []byte { return binary.LittleEndian.AppendUint32(nil, k) }
	val := func(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }
	for k := uint32(0); k < 5; k++ {
		if err := HashInsert(b, p, key(k*16), val(uint64(k)+100)); err != nil {
			t.Fatal(err)
		}
	}
	if err := HashInsert(b, p, key(32), val(7)); err != nil { // update in place
		t.Fatal(err)
	}
	if err := HashInsert(b, p, key(99), val(1)); err == nil || !strings.Contains(err.Error(), "full: it holds 5 entries") {
		t.Fatalf("insert into a full map: %v", err)
	}
	if err := HashInsert(b, p, []byte{1}, val(1)); err == nil {
		t.Fatal("a 1-byte key went into a map of 4-byte keys")
	}
	for k, want := range map[uint32]uint64{0: 100, 16: 101, 32: 7, 48: 103, 64: 104} {
		v, ok := HashLookup(b, p, key(k))
		if !ok || binary.LittleEndian.Uint64(v) != want {
			t.Errorf("key %d: %v %v, want %d", k, v, ok, want)
		}
	}
	if h, _ := ReadHeader(b); h.Count != 5 {
		t.Errorf("count %d, want 5", h.Count)
	}
	n := 0
	HashEntries(b, p, func(k, v []byte) bool { n++; return true })
	if n != 5 {
		t.Errorf("%d entries, want 5", n)
	}
}
