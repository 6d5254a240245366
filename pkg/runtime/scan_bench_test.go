package runtime

import (
	"encoding/binary"
	"testing"

	"github.com/gpubpf/gpubpf/pkg/runtime/gpumap"
)

// BenchmarkDrainScan is the tool's share of a drain at the small preset's
// rate: 16 busy 1 MiB shards of 40-byte records scanned into batches (in
// place), a record first marked (the copy that saw it committed) and then
// consumed (the next copy), as drainRing does.
func BenchmarkDrainScan(b *testing.B) {
	const shards, fill = 16, 512 << 10
	p := gpumap.Placement{Kind: gpumap.RingBuf, RingSize: shards << 20, Shards: shards}
	mem := gpumap.Init(p)
	le := binary.LittleEndian
	S, stride := gpumap.ShardSize(p), gpumap.ShardSize(p)+gpumap.RingTail
	recs := 0
	for i := uint64(0); i < shards; i++ {
		data := shards*gpumap.HeaderSize + i*stride
		pos := uint64(0)
		for ; pos+48 <= fill; pos += 48 {
			le.PutUint64(mem[data+pos:], uint64(uint32(pos>>3))<<32|uint64(40|gpumap.RecValid))
			le.PutUint64(mem[data+pos+8:], pos)
			recs++
		}
		le.PutUint64(mem[i*gpumap.HeaderSize+gpumap.OffReserved:], pos)
	}
	_ = S
	b.ResetTimer()
	for range b.N {
		rs, err := gpumap.NewReaders(mem, gpumap.Mirror)
		if err != nil {
			b.Fatal(err)
		}
		pm := &placedMap{mem: mem}
		holds := make([]*ringHold, len(rs))
		for j := range holds {
			holds[j] = &ringHold{pm: pm}
		}
		for pass := 0; pass < 2; pass++ {
			work := make([]shardScan, 0, shards)
			for j, r := range rs {
				work = append(work, shardScan{r: r, hold: holds[j], reserved: r.Reserved()})
			}
			scanShards(work, 1, 0, "events", false)
			for _, w := range work {
				for _, b := range w.batches {
					b.Release() // as the tools do once they have read it
				}
			}
		}
	}
	b.ReportMetric(float64(recs)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "us/drain")
}
