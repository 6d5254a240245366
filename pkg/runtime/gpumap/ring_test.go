package gpumap

import (
	"encoding/binary"
	"fmt"
	"math/rand"
	"testing"
)

// devRing is a CPU model of a device ring of N shards: reserve does, for
// one warp in one shard, the arithmetic of the PTX __gpubpf_rb_reserve
// (pkg/runtime/jit/runtime_ptx.go) on the same layout, and drain does what
// the agent's ring-drain op does (pkg/runtime/agent/ring.c), so that the
// host reader is tested against records written exactly as the GPU writes
// them.
type devRing struct {
	mem  []byte // N control blocks, then each shard's S data and tail bytes
	S, N uint64
	// tried counts, per shard, the records producers asked for: the
	// truth the GPU's own counters must add up to
	tried map[uint64]uint64
}

func newDevRing(size uint64) *devRing { return newShardedRing(size, 1) }

func newShardedRing(size uint64, shards uint32) *devRing {
	p := Placement{Kind: RingBuf, RingSize: size, Shards: shards}
	return &devRing{mem: Init(p), S: ShardSize(p), N: RingShards(p), tried: map[uint64]uint64{}}
}

var le = binary.LittleEndian

func (d *devRing) ctl(i uint64) uint64  { return i * HeaderSize }
func (d *devRing) data(i uint64) uint64 { return d.N*HeaderSize + i*(d.S+RingTail) }

// get and add work on shard 0's control block; getIn and addIn on shard i's.
func (d *devRing) get(off int) uint64             { return d.getIn(0, off) }
func (d *devRing) getIn(i uint64, off int) uint64 { return le.Uint64(d.mem[d.ctl(i)+uint64(off):]) }
func (d *devRing) addIn(i uint64, off int, v uint64) {
	o := d.ctl(i) + uint64(off)
	le.PutUint64(d.mem[o:], le.Uint64(d.mem[o:])+v)
}

func (d *devRing) reserve(lens []int) []int { return d.reserveIn(0, lens) }

// reserveIn reserves records of lens bytes for the active lanes of one warp
// in shard i and returns each lane's payload offset in mem (-1: dropped).
func (d *devRing) reserveIn(i uint64, lens []int) []int {
	sizes := make([]uint64, len(lens))
	var total uint64
	big := 0
	for k, l := range lens {
		sizes[k] = (uint64(l) + 15) &^ 7
		if sizes[k] > RingTail {
			sizes[k] = 0
			big++
		}
		total += sizes[k]
	}
	out := make([]int, len(lens))
	d.tried[i] += uint64(len(lens))
	base := int64(-1)
	if total > 0 {
		released := d.getIn(i, OffReleased)
		claimed := d.getIn(i, OffClaimed)
		d.addIn(i, OffClaimed, total)
		if claimed+total-released > d.S {
			d.addIn(i, OffClaimed, -total)
			d.addIn(i, OffErrors, uint64(len(lens)))
			big = 0
		} else {
			base = int64(d.getIn(i, OffReserved))
			d.addIn(i, OffReserved, total)
			d.addIn(i, OffRecords, uint64(len(lens)-big))
		}
	}
	if big > 0 {
		d.addIn(i, OffErrors, uint64(big))
	}
	var off uint64
	for k, l := range lens {
		if base < 0 || sizes[k] == 0 {
			out[k] = -1
			continue
		}
		pos := uint64(base) + off
		phys := d.data(i) + pos&(d.S-1)
		le.PutUint64(d.mem[phys:], uint64(uint32(pos>>3))<<32|uint64(l))
		out[k] = int(phys + RecHeader)
		off += sizes[k]
	}
	return out
}

// commit publishes the record whose payload starts at off.
func (d *devRing) commit(off int, discard bool) {
	w := le.Uint32(d.mem[off-8:]) | RecValid
	if discard {
		w |= RecDiscard
	}
	le.PutUint32(d.mem[off-8:], w)
}

// drain is the agent's ring-drain op: publish each shard's release where
// it moved, copy the control blocks, then each shard's data of [release,
// R) into the mirror.
func (d *devRing) drain(mirror []byte, release []uint64) { d.drainFrom(mirror, release, release) }

// drainFrom is drain copying each shard's data from from[i] (at or after
// its release) on: the agent's copy start (protocol 11).
func (d *devRing) drainFrom(mirror []byte, release, from []uint64) {
	for i, rel := range release {
		if rel != le.Uint64(d.mem[d.ctl(uint64(i))+OffReleased:]) {
			le.PutUint64(d.mem[d.ctl(uint64(i))+OffReleased:], rel)
		}
	}
	copy(mirror[:d.N*HeaderSize], d.mem[:d.N*HeaderSize])
	for i, rel := range from {
		r := d.getIn(uint64(i), OffReserved)
		if r <= rel {
			continue
		}
		n := min(r-rel, d.S)
		a := rel & (d.S - 1)
		md, dd := mirror[d.data(uint64(i)):], d.mem[d.data(uint64(i)):]
		if a+n <= d.S {
			copy(md[a:a+n], dd[a:a+n])
		} else {
			copy(md[a:d.S+RingTail], dd[a:d.S+RingTail])
			b := (rel + n) & (d.S - 1)
			copy(md[:b], dd[:b])
		}
	}
}

// host drives Mirror readers the way the runtime does.
type host struct {
	d      *devRing
	mirror []byte
	rs     []*Reader
	r      *Reader // shard 0's
	got    []uint64
	sizes  map[uint64]int
	t      *testing.T
	// maxRun: consume with ScanRuns in runs of at most this many bytes
	// (0: Scan), the pattern scrambled with the seed
	maxRun uint64
}

func newHost(t *testing.T, d *devRing) *host {
	mirror := make([]byte, len(d.mem))
	copy(mirror, d.mem[:d.N*HeaderSize])
	rs, err := NewReaders(mirror, Mirror)
	if err != nil {
		t.Fatal(err)
	}
	return &host{d: d, mirror: mirror, rs: rs, r: rs[0], sizes: map[uint64]int{}, t: t}
}

func (h *host) drain() (delivered, discarded uint64) {
	rel := make([]uint64, len(h.rs))
	for i, r := range h.rs {
		rel[i] = r.Consumed()
	}
	h.d.drain(h.mirror, rel)
	for i, r := range h.rs {
		reserved := r.Reserved()
		// a Mirror's scan consumes what the copy before showed committed
		ready, before := r.Next()-r.Consumed(), r.Consumed()
		var n, x uint64
		if h.maxRun == 0 {
			n, x = r.Scan(reserved, h.check)
		} else {
			n, x = r.ScanRuns(reserved, h.maxRun, func(run *Run) {
				if len(run.Starts) != len(run.Ends) || len(run.Ends) == 0 {
					h.t.Fatalf("run of %d starts and %d ends", len(run.Starts), len(run.Ends))
				}
				if uint64(len(run.Mem)) > h.maxRun && len(run.Ends) > 1 {
					h.t.Fatalf("run of %d bytes holds %d records, over the %d-byte limit", len(run.Mem), len(run.Ends), h.maxRun)
				}
				if run.Ends[len(run.Ends)-1] != uint32(len(run.Mem)) {
					h.t.Fatalf("run of %d bytes ends its last record at %d", len(run.Mem), run.Ends[len(run.Ends)-1])
				}
				for k := range run.Ends {
					if run.Starts[k] < RecHeader || (k > 0 && run.Starts[k] < run.Ends[k-1]+RecHeader) {
						h.t.Fatalf("record %d of a run at %d, after one ending at %d", k, run.Starts[k], run.Ends[max(k, 1)-1])
					}
					h.check(run.Mem[run.Starts[k]:run.Ends[k]])
				}
			})
		}
		if got := r.Consumed() - before; got != ready {
			h.t.Fatalf("shard %d: Next said %d bytes, Scan consumed %d", i, ready, got)
		}
		delivered, discarded = delivered+n, discarded+x
	}
	return delivered, discarded
}

func (h *host) check(rec []byte) {
	if len(rec) < 8 {
		h.t.Fatalf("record of %d bytes", len(rec))
	}
	id := le.Uint64(rec)
	for i := 8; i < len(rec); i++ {
		if rec[i] != byte(id+uint64(i)) {
			h.t.Fatalf("record %d: byte %d is %d, want %d (torn or overwritten)", id, i, rec[i], byte(id+uint64(i)))
		}
	}
	if want, ok := h.sizes[id]; ok && want != len(rec) {
		h.t.Fatalf("record %d has %d bytes, want %d", id, len(rec), want)
	}
	h.got = append(h.got, id)
}

// producer is the GPU side of a test: warps that reserve, fill and commit
// (or discard, one record in discardOneIn) records with increasing ids.
type producer struct {
	d            *devRing
	rng          *rand.Rand
	discardOneIn int
	id, discards uint64
	committed    map[uint64]bool
}

func newProducer(d *devRing, rng *rand.Rand, discardOneIn int) *producer {
	return &producer{d: d, rng: rng, discardOneIn: discardOneIn, committed: map[uint64]bool{}}
}

// warp reserves lens in shard sh and tells seen each record it wrote.
func (p *producer) warp(sh uint64, lens []int, seen func(id uint64, n int)) {
	for i, off := range p.d.reserveIn(sh, lens) {
		if off < 0 {
			continue
		}
		fill(p.d.mem[off:off+lens[i]], p.id)
		seen(p.id, lens[i])
		discard := p.rng.Intn(p.discardOneIn) == 0
		if discard {
			p.discards++
		} else {
			p.committed[p.id] = true
		}
		p.d.commit(off, discard)
		p.id++
	}
}

func fill(b []byte, id uint64) {
	le.PutUint64(b, id)
	for i := 8; i < len(b); i++ {
		b[i] = byte(id + uint64(i))
	}
}

// TestRingStream: warps of uniform and mixed record sizes, drained as they
// come, in a ring small enough to wrap hundreds of times and to fill: every
// record arrives once, whole, in order, and produced = delivered + dropped +
// discarded holds exactly.
func TestRingStream(t *testing.T) {
	for _, maxRun := range []uint64{0, 1, 300, 1 << 20} {
		t.Run(fmt.Sprintf("runs-%d", maxRun), func(t *testing.T) { testRingStream(t, maxRun) })
	}
}

func testRingStream(t *testing.T, maxRun uint64) {
	rng := rand.New(rand.NewSource(1))
	d := newDevRing(1 << 14)
	h := newHost(t, d)
	h.maxRun = maxRun
	pr := newProducer(d, rng, 50)
	for round := 0; round < 3000; round++ {
		for w := 0; w < 1+rng.Intn(4); w++ {
			lanes := 1 + rng.Intn(32)
			lens := make([]int, lanes)
			uniform := rng.Intn(2) == 0
			for i := range lens {
				lens[i] = 8 + rng.Intn(120)
				if uniform {
					lens[i] = 40
				}
				if rng.Intn(500) == 0 {
					lens[i] = RingTail // over the limit with its header
				}
			}
			pr.warp(0, lens, func(id uint64, n int) { h.sizes[id] = n })
		}
		if rng.Intn(3) == 0 {
			h.drain()
		}
	}
	for i := 0; i < 3 && h.r.Consumed() < d.get(OffReserved); i++ {
		h.drain()
	}
	if h.r.Consumed() != d.get(OffReserved) {
		t.Fatalf("released %d of %d reserved bytes", h.r.Consumed(), d.get(OffReserved))
	}
	produced, dropped := d.tried[0], d.get(OffErrors)
	if dropped == 0 {
		t.Fatalf("the ring never filled: the test does not exercise drops")
	}
	if produced != uint64(len(h.got))+dropped+pr.discards {
		t.Fatalf("produced %d != delivered %d + dropped %d + discarded %d", produced, len(h.got), dropped, pr.discards)
	}
	for i := 1; i < len(h.got); i++ {
		if h.got[i] <= h.got[i-1] {
			t.Fatalf("record %d arrived after %d", h.got[i], h.got[i-1])
		}
	}
	if len(h.got) != len(pr.committed) {
		t.Fatalf("%d records delivered, %d committed", len(h.got), len(pr.committed))
	}
	if h.r.Dropped() != dropped || h.r.Produced() != produced {
		t.Fatalf("reader counters %d/%d, ring %d/%d", h.r.Dropped(), h.r.Produced(), dropped, produced)
	}
}

// TestRingShards: warps on eight shards (as %smid picks them), drained
// together: every committed record arrives once and whole, in reservation
// order within its shard, each shard fills and drops on its own, and the
// counters summed over the shards add up exactly.
func TestRingShards(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	d := newShardedRing(8*4096, 8)
	if d.N != 8 || d.S != 4096 {
		t.Fatalf("%d shards of %d bytes, want 8 of 4096", d.N, d.S)
	}
	h := newHost(t, d)
	pr := newProducer(d, rng, 40)
	shardOf := map[uint64]uint64{}
	for round := 0; round < 2000; round++ {
		for w := 0; w < 1+rng.Intn(6); w++ {
			// shard 0 gets most warps, so it fills while the others do not
			sh := uint64(rng.Intn(8))
			if rng.Intn(2) == 0 {
				sh = 0
			}
			lens := make40(1 + rng.Intn(32))
			pr.warp(sh, lens, func(id uint64, _ int) { shardOf[id] = sh })
		}
		if rng.Intn(4) == 0 {
			h.drain()
		}
	}
	for range 3 {
		h.drain()
	}
	var produced, dropped uint64
	for i, r := range h.rs {
		if r.Consumed() != d.getIn(uint64(i), OffReserved) {
			t.Fatalf("shard %d: released %d of %d reserved bytes", i, r.Consumed(), d.getIn(uint64(i), OffReserved))
		}
		if r.Produced() != d.tried[uint64(i)] || r.Dropped() != d.getIn(uint64(i), OffErrors) {
			t.Fatalf("shard %d: reader counters differ from the ring's", i)
		}
		produced, dropped = produced+r.Produced(), dropped+r.Dropped()
	}
	for i := uint64(1); i < d.N; i++ {
		if d.getIn(0, OffErrors) <= 2*d.getIn(i, OffErrors) {
			t.Fatalf("drops: shard 0 %d, shard %d %d; want the busy shard to drop most", d.getIn(0, OffErrors), i, d.getIn(i, OffErrors))
		}
	}
	if produced != uint64(len(h.got))+dropped+pr.discards || len(h.got) != len(pr.committed) {
		t.Fatalf("produced %d != delivered %d + dropped %d + discarded %d (%d committed)", produced, len(h.got), dropped, pr.discards, len(pr.committed))
	}
	last := map[uint64]uint64{}
	seen := map[uint64]bool{}
	for _, g := range h.got {
		sh := shardOf[g]
		if l, ok := last[sh]; (ok && g <= l) || seen[g] {
			t.Fatalf("record %d of shard %d out of order or twice", g, sh)
		}
		last[sh], seen[g] = g, true
	}
}

// TestRingWrapIntoTail: a record starting a few bytes before the end of the
// data area is written on into the tail and delivered contiguous.
func TestRingWrapIntoTail(t *testing.T) {
	d := newDevRing(4096)
	h := newHost(t, d)
	var id uint64
	put := func(n int) {
		off := d.reserve([]int{n})[0]
		if off < 0 {
			t.Fatalf("record of %d bytes dropped", n)
		}
		fill(d.mem[off:off+n], id)
		h.sizes[id] = n
		d.commit(off, false)
		id++
	}
	put(4096 - 8 - 16) // ends 16 bytes before the end of the data area
	for i := 0; i < 3; i++ {
		h.drain()
	}
	put(200) // runs 184 bytes into the tail
	put(64)  // continues at the physical start
	for i := 0; i < 3; i++ {
		h.drain()
	}
	if len(h.got) != 3 || h.r.Consumed() != d.get(OffReserved) {
		t.Fatalf("got %v, released %d of %d", h.got, h.r.Consumed(), d.get(OffReserved))
	}
}

// TestRingTornCopy: a copy that caught a record committed but with part of
// its payload not yet copied must not deliver it; the next copy does.
func TestRingTornCopy(t *testing.T) {
	d := newDevRing(4096)
	h := newHost(t, d)
	off := d.reserve([]int{64})[0]
	fill(d.mem[off:off+64], 7)
	d.commit(off, false)
	d.drain(h.mirror, []uint64{0})
	h.mirror[off+40] ^= 0xff // the copy engine read this part before it was written
	n, _ := h.r.Scan(h.r.Reserved(), func([]byte) { t.Fatal("delivered a record seen committed in one copy only") })
	if n != 0 {
		t.Fatalf("delivered %d", n)
	}
	if n, _ := h.drain(); n != 1 || len(h.got) != 1 || h.got[0] != 7 {
		t.Fatalf("second copy delivered %d (%v)", n, h.got)
	}
}

// Two mirrors taking turns, as a streaming ring's drains use them: the copy
// into one runs while the tool scans the other (here it completes before the
// scan, the order a real one can end in), copying from where the scan will
// have consumed to (Next) and releasing what was consumed before it. Every
// record arrives once, whole, in order, and a copy that caught a record
// committed with part of its payload not yet written (the copy into the
// other mirror, torn) never delivers it.
func TestRingTwoMirrors(t *testing.T) {
	rng := rand.New(rand.NewSource(5))
	d := newShardedRing(2*4096, 2)
	mirrors := [2][]byte{make([]byte, len(d.mem)), make([]byte, len(d.mem))}
	copy(mirrors[0], d.mem[:d.N*HeaderSize])
	rs, err := NewReaders(mirrors[0], Mirror)
	if err != nil {
		t.Fatal(err)
	}
	pr := newProducer(d, rng, 30)
	var got []uint64
	check := func(rec []byte) {
		id := le.Uint64(rec)
		for i := 8; i < len(rec); i++ {
			if rec[i] != byte(id+uint64(i)) {
				t.Fatalf("record %d: byte %d is %d, want %d (torn or overwritten)", id, i, rec[i], byte(id+uint64(i)))
			}
		}
		got = append(got, id)
	}
	rel := func(f func(r *Reader) uint64) []uint64 {
		v := make([]uint64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		return v
	}
	cur, torn := 0, 0
	d.drain(mirrors[cur], rel((*Reader).Consumed))
	step := func() {
		if err := Rebase(rs, mirrors[cur]); err != nil {
			t.Fatal(err)
		}
		other := 1 - cur
		d.drainFrom(mirrors[other], rel((*Reader).Consumed), rel((*Reader).Next))
		// the copy caught a record of shard 0 committed while it ran (not
		// in the copy before, which finished before it began) with its
		// last payload byte not yet written
		if r := rs[0]; d.getIn(0, OffReserved) > r.Next() && rng.Intn(2) == 0 {
			pos, last := r.Next(), ^uint64(0)
			committed := func(m []byte, pos uint64) (uint32, bool) {
				h := le.Uint64(m[d.data(0)+pos&(d.S-1):])
				return uint32(h), uint32(h)&RecValid != 0 && uint32(h>>32) == uint32(pos>>3)
			}
			for pos < d.getIn(0, OffReserved) {
				w0, ok := committed(mirrors[other], pos)
				if !ok {
					break
				}
				if _, before := committed(mirrors[cur], pos); !before {
					last = pos
				}
				pos += (RecHeader + uint64(w0&^(RecValid|RecDiscard)) + 7) &^ 7
			}
			if last != ^uint64(0) {
				l := uint64(uint32(le.Uint64(mirrors[other][d.data(0)+last&(d.S-1):])) &^ (RecValid | RecDiscard))
				mirrors[other][d.data(0)+last&(d.S-1)+RecHeader+l-1] ^= 0x5a
				torn++
			}
		}
		for _, r := range rs {
			r.ScanRuns(r.Reserved(), 1<<20, func(run *Run) {
				for k := range run.Ends {
					check(run.Mem[run.Starts[k]:run.Ends[k]])
				}
			})
		}
		cur = other
	}
	for round := 0; round < 3000; round++ {
		for w := 0; w < 1+rng.Intn(4); w++ {
			pr.warp(uint64(rng.Intn(2)), make40(1+rng.Intn(32)), func(uint64, int) {})
		}
		if rng.Intn(3) == 0 {
			step()
		}
	}
	for range 4 {
		step()
	}
	if torn == 0 {
		t.Fatal("no copy was torn: the test does not exercise the rule")
	}
	for i := 1; i < len(got); i++ {
		if got[i] == got[i-1] {
			t.Fatalf("record %d delivered twice", got[i])
		}
	}
	if len(got) != len(pr.committed) {
		t.Fatalf("%d records delivered, %d committed (%d copies torn)", len(got), len(pr.committed), torn)
	}
	for i, r := range rs {
		if r.Consumed() != d.getIn(uint64(i), OffReserved) {
			t.Fatalf("shard %d: consumed %d of %d reserved bytes", i, r.Consumed(), d.getIn(uint64(i), OffReserved))
		}
	}
}

// TestRingInFlight: a reserved record not committed yet stops the reader;
// records after it wait, and nothing is released past it.
func TestRingInFlight(t *testing.T) {
	d := newDevRing(4096)
	h := newHost(t, d)
	offs := d.reserve([]int{16, 16, 16})
	for i, off := range offs {
		fill(d.mem[off:off+16], uint64(i))
	}
	d.commit(offs[0], false)
	d.commit(offs[2], false)
	h.drain()
	h.drain()
	if len(h.got) != 1 || h.r.Consumed() != 24 {
		t.Fatalf("got %v, released %d", h.got, h.r.Consumed())
	}
	d.commit(offs[1], false)
	h.drain()
	h.drain()
	if len(h.got) != 3 {
		t.Fatalf("got %v after the commit", h.got)
	}
}

// TestRingLive: a host-data ring read in place, lap after lap, with no
// zeroing: headers of earlier laps are told apart by their position tag.
func TestRingLive(t *testing.T) {
	d := newDevRing(4096)
	r, err := NewReader(d.mem, Live)
	if err != nil {
		t.Fatal(err)
	}
	for round := 0; round < 300; round++ {
		lens := []int{40, 40, 24 + round%17}
		offs := d.reserve(lens)
		for i, off := range offs {
			if off < 0 {
				t.Fatalf("round %d: dropped", round)
			}
			fill(d.mem[off:off+lens[i]], uint64(round*3+i))
			d.commit(off, false)
		}
		n, _ := r.Scan(d.get(OffReserved), func([]byte) {})
		if n != 3 {
			t.Fatalf("round %d: %d records", round, n)
		}
		le.PutUint64(d.mem[OffReleased:], r.Consumed())
		// A reserved, uncommitted record over an old committed header of
		// the same offset must not be read.
		if round == 200 {
			off := d.reserve([]int{40})[0]
			if n, _ := r.Scan(d.get(OffReserved), func([]byte) {}); n != 0 {
				t.Fatalf("read an uncommitted record")
			}
			d.commit(off, true)
			r.Scan(d.get(OffReserved), func([]byte) {})
			le.PutUint64(d.mem[OffReleased:], r.Consumed())
		}
	}
}

// TestRingCorrupt: a header whose length runs past the reserved position
// stops the reader and is counted, never read past.
func TestRingCorrupt(t *testing.T) {
	d := newDevRing(4096)
	le.PutUint64(d.mem[HeaderSize:], 4000|RecValid) // tag 0: position 0
	le.PutUint64(d.mem[OffReserved:], 64)
	r, err := NewReader(d.mem, Snapshot)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := r.Scan(64, func([]byte) {}); n != 0 || r.Corrupt() != 1 {
		t.Fatalf("delivered %d, corrupt %d", n, r.Corrupt())
	}
}

func TestNewReadersErrors(t *testing.T) {
	good := Init(Placement{Kind: RingBuf, RingSize: 4 * 4096, Shards: 4})
	if rs, err := NewReaders(good, Mirror); err != nil || len(rs) != 4 {
		t.Fatalf("4 shards: %d readers, %v", len(rs), err)
	}
	for name, mem := range map[string][]byte{
		"short": good[:len(good)-8],
		"shards not pow2": func() []byte {
			b := append([]byte(nil), good...)
			le.PutUint32(b[OffShards:], 3)
			return b
		}(),
		"shard 2 without magic": func() []byte {
			b := append([]byte(nil), good...)
			le.PutUint32(b[2*HeaderSize:], 0)
			return b
		}(),
	} {
		if _, err := NewReaders(mem, Mirror); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestDefaultShards(t *testing.T) {
	for _, tc := range []struct {
		size uint64
		want uint32
	}{{4096, 1}, {1 << 20, 1}, {2 << 20, 2}, {8 << 20, 8}, {32 << 20, 32}, {256 << 20, 32}} {
		if got := DefaultShards(tc.size); got != tc.want {
			t.Errorf("DefaultShards(%d) = %d, want %d", tc.size, got, tc.want)
		}
	}
	p := Placement{Kind: RingBuf, RingSize: 32 << 20, Shards: 32, Addr: 0x1000}
	if ShardSize(p) != 1<<20 || RingData(p) != 0x1000+32*HeaderSize || MirrorSize(p) != 32*(HeaderSize+(1<<20)+RingTail) {
		t.Fatalf("layout of 32 shards: size %d data %#x mirror %d", ShardSize(p), RingData(p), MirrorSize(p))
	}
}

func TestNewReaderErrors(t *testing.T) {
	good := Init(Placement{Kind: RingBuf, RingSize: 4096})
	for name, mem := range map[string][]byte{
		"short":    good[:HeaderSize+4096],
		"no magic": make([]byte, len(good)),
		"not pow2": func() []byte {
			b := append([]byte(nil), good...)
			le.PutUint32(b[OffSlots:], 5000)
			return b
		}(),
	} {
		if _, err := NewReader(mem, Mirror); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// FuzzReader: any bytes in a mirror, any reserved position: Scan never
// reads outside the memory and never delivers a record longer than the tail.
func FuzzReader(f *testing.F) {
	f.Add([]byte{8, 0, 0, 0x80, 0, 0, 0, 0}, uint64(16), uint64(0), uint8(0))
	f.Add([]byte{255, 255, 255, 255}, uint64(1<<40), uint64(4090), uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, reserved, released uint64, mode uint8) {
		mem := Init(Placement{Kind: RingBuf, RingSize: 4096})
		copy(mem[HeaderSize:], data)
		r, err := NewReader(mem, ReaderMode(mode%3))
		if err != nil {
			t.Fatal(err)
		}
		r.consumed, r.verified = released, released
		for i := 0; i < 2; i++ {
			r.Scan(reserved, func(rec []byte) {
				if len(rec) > RingTail {
					t.Fatalf("record of %d bytes", len(rec))
				}
			})
		}
	})
}

// recs is how many records benchRing holds.
const recs = 1 << 16

// benchRing is a ring of recs committed 40-byte records, and its reserved
// position.
func benchRing() (*devRing, uint64) {
	d := newDevRing(1 << 23)
	for w := 0; w < recs/32; w++ {
		for i, o := range d.reserve(make40(32)) {
			fill(d.mem[o:o+40], uint64(w*32+i))
			d.commit(o, false)
		}
	}
	return d, d.get(OffReserved)
}

// BenchmarkScan is the host side of the event path: 40-byte records (the
// kernel_trace event) parsed out of a drained mirror and handed to a
// consumer that reads one field.
func BenchmarkScan(b *testing.B) {
	d, reserved := benchRing()
	var sum uint64
	b.ResetTimer()
	r, _ := NewReader(d.mem, Snapshot)
	for i := 0; i < b.N; i += recs {
		r.consumed, r.verified = 0, 0 // the same records again, as a reader that keeps up
		r.Scan(reserved, func(rec []byte) { sum += le.Uint64(rec) })
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
	if sum == 0 {
		b.Fatal(fmt.Sprint(sum))
	}
}

// BenchmarkScanRuns is the drain's scan: the same records in runs of up
// to 4 MiB, each record's bounds noted (the tool reads them in place).
func BenchmarkScanRuns(b *testing.B) {
	d, reserved := benchRing()
	var n int
	b.ResetTimer()
	r, _ := NewReader(d.mem, Snapshot)
	for i := 0; i < b.N; i += recs {
		r.consumed, r.verified = 0, 0
		r.ScanRuns(reserved, 4<<20, func(run *Run) { n += len(run.Ends) })
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
	if n == 0 {
		b.Fatal("no records")
	}
}

func make40(n int) []int {
	l := make([]int, n)
	for i := range l {
		l[i] = 40
	}
	return l
}

// A wait bound (Placement.WaitMicros) is in every shard's control block,
// where the GPU's reservation reads it when the shard is full, and the
// warps' waits it counts there reach the host through the Readers.
func TestRingWaitBound(t *testing.T) {
	for _, bound := range []uint32{0, 250} {
		p := Placement{Kind: RingBuf, RingSize: 4 * 8192, Shards: 4, WaitMicros: bound}
		d := &devRing{mem: Init(p), S: ShardSize(p), N: RingShards(p)}
		for i := range d.N {
			if got := le.Uint32(d.mem[d.ctl(i)+OffWaitBound:]); got != bound {
				t.Errorf("shard %d: wait bound %d, want %d", i, got, bound)
			}
		}
		d.addIn(2, OffWaits, 7)
		d.addIn(2, OffWaitDrops, 3)
		rs, err := NewReaders(d.mem, Snapshot)
		if err != nil {
			t.Fatal(err)
		}
		var waits, drops uint64
		for _, r := range rs {
			waits, drops = waits+r.Waits(), drops+r.WaitDrops()
		}
		if waits != 7 || drops != 3 {
			t.Errorf("bound %d: %d waits, %d gave up; want 7, 3", bound, waits, drops)
		}
	}
	// the new fields overlap none of the control block's others
	fields := map[int]int{OffSlots: 4, OffErrors: 8, OffRecords: 8, OffTail: 4, OffShards: 4, OffBudget: 8,
		OffReserved: 8, OffReleased: 8, OffClaimed: 8}
	for off, n := range map[int]int{OffWaitBound: 4, OffWaits: 8, OffWaitDrops: 8} {
		for used, m := range fields {
			if off < used+m && used < off+n {
				t.Errorf("bytes %d-%d overlap bytes %d-%d", off, off+n-1, used, used+m-1)
			}
		}
		fields[off] = n
	}
}

// A consumer that keeps a run's record bounds (leaving other slices in
// their place, as the tool's in-place batches do) keeps them right: later
// scans, Mirror and Snapshot, reuse only what it handed back.
func TestScanRunsKeptBounds(t *testing.T) {
	for _, mode := range []ReaderMode{Mirror, Snapshot} {
		d := newDevRing(1 << 16)
		mirror := append([]byte(nil), d.mem...)
		r, err := NewReader(mirror, mode)
		if err != nil {
			t.Fatal(err)
		}
		type kept struct {
			mem          []byte
			starts, ends []uint32
			first        uint64
		}
		var all []kept
		var id uint64
		for round := range 40 {
			// records of unlike sizes: runs of them have unlike bounds
			lens := make([]int, 32)
			for k := range lens {
				lens[k] = 8 + 8*int((id+uint64(k))%5)
			}
			for k, o := range d.reserve(lens) {
				fill(d.mem[o:o+lens[k]], id)
				d.commit(o, false)
				id++
			}
			d.drain(mirror, []uint64{r.Consumed()})
			r.ScanRuns(d.get(OffReserved), 96, func(run *Run) {
				all = append(all, kept{run.Mem, run.Starts, run.Ends, le.Uint64(run.Mem[run.Starts[0]:])})
				run.Starts, run.Ends = nil, nil
			})
			// what the reader handed out stays as it was handed out (the
			// mirror's bytes are the consumer's to hold; here nothing
			// released them, and the ring is large enough not to wrap)
			want := uint64(0)
			for _, k := range all {
				if k.first != want {
					t.Fatalf("%v round %d: a kept run starts at record %d, want %d", mode, round, k.first, want)
				}
				for i := range k.ends {
					rec := k.mem[k.starts[i]:k.ends[i]]
					if v := le.Uint64(rec); v != want || len(rec) != 8+8*int(want%5) {
						t.Fatalf("%v round %d: kept record %d is record %d of %d bytes", mode, round, want, v, len(rec))
					}
					want++
				}
			}
		}
		if len(all) < 40 {
			t.Fatalf("%v: %d runs", mode, len(all))
		}
	}
}
