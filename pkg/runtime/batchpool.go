package runtime

import (
	"math/bits"
	"sync"
)

// Batch memory comes in size classes, powers of two from minBatch: a
// streaming ring soon has batches that any later drain fits in, a trickle
// never makes big ones.
const (
	minBatch     = 64 << 10
	batchClasses = 8 // 64 KiB .. 8 MiB (batchBytes plus a ring's tail fits)
	// poolBytes bounds the memory released batches keep.
	poolBytes = 64 << 20
)

// batchPool keeps released batches with their memory, by size class. Memory
// a batch already touched costs nothing to fill again; fresh memory costs a
// page fault per 4 KiB, about 0.5 ms per MiB copied: the first drains of a
// streaming ring scanned for 5 ms each while its shards filled and dropped
// records (H100 machine, 2026-11-23). Unlike a sync.Pool it keeps them
// across garbage collections, up to poolBytes.
type batchPool struct {
	mu    sync.Mutex
	free  [batchClasses][]*Batch
	bytes uint64
}

var batches batchPool

// batchClass is the smallest class that holds n bytes (the largest for more).
func batchClass(n uint64) int {
	if n <= minBatch {
		return 0
	}
	return min(bits.Len64((n-1)/minBatch), batchClasses-1)
}

// batchMem is what a batch of class c holds: its data and, for records of
// 16 bytes or more, their bounds.
func batchMem(c int) uint64 { return (minBatch << c) * 3 / 2 }

// get returns a batch with room for n bytes of records (at most the largest
// class), a released one where there is one.
func (p *batchPool) get(n uint64) *Batch {
	c := batchClass(n)
	p.mu.Lock()
	for k := c; k < batchClasses; k++ {
		if l := len(p.free[k]); l > 0 {
			b := p.free[k][l-1]
			p.free[k][l-1] = nil
			p.free[k] = p.free[k][:l-1]
			p.bytes -= batchMem(k)
			p.mu.Unlock()
			return b
		}
	}
	p.mu.Unlock()
	return newBatchOf(c)
}

func newBatchOf(c int) *Batch {
	size := minBatch << c
	recs := size / 16 // records are 16 bytes or more
	return &Batch{data: make([]byte, 0, size), starts: make([]uint32, 0, recs), ends: make([]uint32, 0, recs)}
}

// put keeps b's memory for a later get (b must not be used after).
func (p *batchPool) put(b *Batch) {
	c := batchClass(uint64(cap(b.data)))
	if minBatch<<c != cap(b.data) || cap(b.ends) < cap(b.data)/16 || cap(b.starts) < cap(b.data)/16 {
		return // not a pool batch (a printk batch): the GC takes it
	}
	*b = Batch{data: b.data[:0], starts: b.starts[:0], ends: b.ends[:0]}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bytes+batchMem(c) > poolBytes {
		return
	}
	p.free[c] = append(p.free[c], b)
	p.bytes += batchMem(c)
}

// warm puts n batches of class c in the pool with every page touched, for a
// ring about to stream: its first drains then copy at the later rate. Run
// while the agent still prepares the application's first launches.
func (p *batchPool) warm(n, c int) {
	for range n {
		p.mu.Lock()
		full := p.bytes+batchMem(c) > poolBytes
		p.mu.Unlock()
		if full {
			return
		}
		b := newBatchOf(c)
		d := b.data[:cap(b.data)]
		s, e := b.starts[:cap(b.starts)], b.ends[:cap(b.ends)]
		for i := 0; i < len(d); i += 4096 {
			d[i] = 0
		}
		for i := 0; i < len(s); i += 1024 {
			s[i], e[i] = 0, 0
		}
		p.put(b)
	}
}
