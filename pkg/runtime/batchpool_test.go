package runtime

import (
	"testing"
	"time"

	"github.com/gpubpf/gpubpf/pkg/runtime/gpumap"
)

func TestBatchClass(t *testing.T) {
	for _, c := range []struct {
		n    uint64
		want int
	}{
		{0, 0}, {1, 0}, {64 << 10, 0}, {64<<10 + 1, 1}, {128 << 10, 1}, {300 << 10, 3},
		{4<<20 + gpumap.RingTail, 7}, {8 << 20, 7}, {1 << 30, 7},
	} {
		if got := batchClass(c.n); got != c.want {
			t.Errorf("batchClass(%d) = %d, want %d", c.n, got, c.want)
		}
	}
}

func TestBatchPool(t *testing.T) {
	var p batchPool
	b := p.get(100 << 10)
	if cap(b.data) != 128<<10 || cap(b.ends) != 128<<10/16 {
		t.Fatalf("fresh batch for 100 KiB: data %d, bounds %d", cap(b.data), cap(b.ends))
	}
	b.data = append(b.data, 1, 2, 3)
	b.starts, b.ends = append(b.starts, 0), append(b.ends, 3)
	b.PID, b.Map = 7, "events"
	p.put(b)
	if p.bytes != batchMem(1) {
		t.Fatalf("pool holds %d bytes, want %d", p.bytes, batchMem(1))
	}
	// a smaller request takes the larger released batch, emptied
	if got := p.get(10); got != b || len(got.data) != 0 || got.Len() != 0 || got.PID != 0 || got.Map != "" {
		t.Fatalf("got %p (len %d, %d records, pid %d), want the released batch %p emptied", got, len(got.data), got.Len(), got.PID, b)
	}
	if p.bytes != 0 {
		t.Fatalf("pool holds %d bytes after handing its batch out", p.bytes)
	}
	// a larger one does not
	p.put(b)
	if got := p.get(1 << 20); got == b || cap(got.data) != 1<<20 {
		t.Fatalf("1 MiB request got %d bytes (the 128 KiB batch: %v)", cap(got.data), got == b)
	}
	// a batch that outgrew its class (append reallocated) is left to the GC
	p = batchPool{}
	odd := &Batch{data: make([]byte, 0, 100<<10), starts: make([]uint32, 0, 1<<13), ends: make([]uint32, 0, 1<<13)}
	p.put(odd)
	p.put(&Batch{Lines: []string{"printk"}})
	if p.bytes != 0 {
		t.Fatalf("pool kept %d bytes of batches that are not its own", p.bytes)
	}
}

func TestBatchPoolBound(t *testing.T) {
	var p batchPool
	p.warm(1000, 7) // 8 MiB batches: the bound stops it early
	if p.bytes > poolBytes || p.bytes+batchMem(7) <= poolBytes {
		t.Fatalf("warm left %d bytes in the pool, want just under %d", p.bytes, poolBytes)
	}
	n := len(p.free[7])
	p.put(newBatchOf(7))
	if len(p.free[7]) != n {
		t.Fatalf("a full pool took another batch")
	}
}

func TestNextDrain(t *testing.T) {
	const shards = 4
	pl := gpumap.Placement{Kind: gpumap.RingBuf, RingSize: shards << 20, Shards: shards}
	rs, err := gpumap.NewReaders(gpumap.Init(pl), gpumap.Mirror)
	if err != nil {
		t.Fatal(err)
	}
	const ms = uint64(time.Millisecond)
	r := &ringState{readers: rs, maxWait: pollInterval, lastReserved: make([]uint64, shards)}
	// the first drain has no rate yet: the poll interval
	if got := r.nextDrain(10*ms, []uint64{0, 0, 0, 0}, []uint64{0, 0, 0, 0}); got != pollInterval {
		t.Fatalf("first drain: next in %v, want %v", got, pollInterval)
	}
	for _, c := range []struct {
		name          string
		at            uint64
		reserved, pnd []uint64
		want          time.Duration
	}{
		{"quiet", 20 * ms, []uint64{0, 0, 0, 0}, []uint64{0, 0, 0, 0}, pollInterval},
		// shard 1 took 64 KiB in 1 ms and holds 64 KiB: a quarter (256
		// KiB) in 3 ms, later than the interval
		{"trickle", 21 * ms, []uint64{0, 64 << 10, 0, 0}, []uint64{0, 64 << 10, 0, 0}, pollInterval},
		// 128 KiB more in 1 ms, 64 KiB pending: 192 KiB to go, 1.5 ms
		{"streaming", 22 * ms, []uint64{0, 192 << 10, 0, 0}, []uint64{0, 64 << 10, 0, 0}, 1500 * time.Microsecond},
		// the busiest shard sets the time
		{"two shards", 23 * ms, []uint64{256 << 10, 256 << 10, 0, 0}, []uint64{128 << 10, 0, 0, 0}, 500 * time.Microsecond},
		{"filling", 24 * ms, []uint64{256 << 10, 256<<10 + 1, 0, 0}, []uint64{200 << 10, 0, 0, 0}, 0},
	} {
		if got := r.nextDrain(c.at, c.reserved, c.pnd); got != c.want {
			t.Errorf("%s: next drain in %v, want %v", c.name, got, c.want)
		}
	}
}
