package runtime

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/gpubpf/gpubpf/pkg/runtime/agentproto"
	"github.com/gpubpf/gpubpf/pkg/runtime/gpumap"
)

// A ring drained through the real agent (over the stand-in driver) while a
// producer writes records into its device memory the way the GPU does: with
// the ring streaming (each drain finds it more than an eighth full) the
// drains take turns between two mirrors, the copy into one made while the
// tool scans the other, and batches come in place and are released late.
// Every record arrives once, whole, in order; the account adds up.
func TestRingDrainTwoMirrorsStandIn(t *testing.T) {
	for _, ahead := range []bool{true, false} {
		name := "ahead"
		if !ahead {
			name = "one-mirror"
		}
		t.Run(name, func(t *testing.T) { testRingDrainStandIn(t, ahead) })
	}
}

func testRingDrainStandIn(t *testing.T, ahead bool) {
	was := ringAhead
	ringAhead = ahead
	t.Cleanup(func() { ringAhead = was })
	conn, _ := standInApp(t)
	var log bytes.Buffer // a drain the agent refused says so here
	s := &Session{procs: map[int]*Process{}, kern: &kernelSide{}, batches: make(chan *Batch, 1<<12), opts: Options{Log: &log}}
	s.consumed.Store(true)
	target := agentproto.Target{Device: 0}
	d := &device{target: target, maps: map[string]*placedMap{}}
	p := &Process{PID: 4242, s: s, conn: conn, devs: map[agentproto.Target]*device{target: d}}
	d.p = p
	s.procs[p.PID] = p
	m, err := d.ring("events", gpumap.Placement{Kind: gpumap.RingBuf, RingSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	d.maps["events"] = m
	if ahead {
		p.secondMirror(d, m) // as placing a program's ring does
	}
	S := gpumap.ShardSize(m.place)
	if gpumap.RingShards(m.place) != 1 {
		t.Fatalf("%d shards, want 1", gpumap.RingShards(m.place))
	}
	le := binary.LittleEndian
	ctl, data := m.place.Addr, m.place.Addr+gpumap.HeaderSize
	u64 := func(off uint64) uint64 {
		b, err := conn.Read(target, ctl+off, 8)
		if err != nil {
			t.Fatal(err)
		}
		return le.Uint64(b)
	}
	put := func(addr uint64, b []byte) {
		if err := conn.Write(target, addr, b); err != nil {
			t.Fatal(err)
		}
	}
	// produce n records of 40, 48 or 56 bytes (by id: runs of unlike
	// records have unlike bounds) where there is room, as a warp does:
	// claim, take positions, write, commit; the rest count as dropped
	var pos, id, produced, dropped uint64
	size := func(id uint64) int { return 40 + 8*int(id%3) }
	produce := func(n int) {
		released := u64(gpumap.OffReleased)
		for range n {
			produced++
			l := size(id)
			if pos+uint64(8+l)-released > S {
				dropped++
				continue
			}
			rec := make([]byte, 8+l)
			le.PutUint64(rec, uint64(uint32(pos>>3))<<32|uint64(uint32(l)|gpumap.RecValid))
			le.PutUint64(rec[8:], id)
			for i := 16; i < len(rec); i++ {
				rec[i] = byte(id) + byte(i)
			}
			off := pos & (S - 1) // a record may run on into the tail
			put(data+off, rec)
			pos += uint64(len(rec))
			id++
		}
		hdr := make([]byte, 8)
		le.PutUint64(hdr, pos)
		put(ctl+gpumap.OffReserved, hdr)
		put(ctl+gpumap.OffClaimed, hdr)
		le.PutUint64(hdr, produced-dropped)
		put(ctl+gpumap.OffRecords, hdr)
		le.PutUint64(hdr, dropped)
		put(ctl+gpumap.OffErrors, hdr)
	}
	var got []uint64
	var held []*Batch
	// check: a batch's records are whole and number on from first, also
	// while the tool holds it across later drains (whose scans must not
	// reuse its memory)
	check := func(b *Batch, first uint64) {
		for i := range b.Len() {
			r := b.Record(i)
			v := le.Uint64(r)
			if v != first+uint64(i) || len(r) != size(v) {
				t.Fatalf("a held batch's record %d is record %d of %d bytes, want %d of %d", i, v, len(r), first+uint64(i), size(first+uint64(i)))
			}
			for k := 8; k < len(r); k++ {
				if r[k] != byte(v)+byte(k+8) {
					t.Fatalf("record %d: byte %d is %d, want %d", v, k, r[k], byte(v)+byte(k+8))
				}
			}
		}
	}
	firsts := map[*Batch]uint64{}
	release := func(b *Batch) {
		check(b, firsts[b])
		delete(firsts, b)
		b.Release()
	}
	take := func() {
		for {
			select {
			case b := <-s.batches:
				if b.Len() > 0 {
					firsts[b] = le.Uint64(b.Record(0))
					check(b, firsts[b])
				}
				for i := range b.Len() {
					got = append(got, le.Uint64(b.Record(i)))
				}
				held = append(held, b)
			default:
				// release all but the newest batch: the tool holds some
				for len(held) > 1 {
					release(held[0])
					held = held[1:]
				}
				return
			}
		}
	}
	for round := range 60 {
		n := 200 + round%3*50 // 9.6-14.4 KiB a round into a 64 KiB ring: streaming
		if round%10 == 9 {
			n = 1500 // a burst larger than the ring
		}
		if round >= 30 && round < 40 {
			n = 20 // quiet: drains in one mirror, the other left behind
		}
		produce(n)
		p.drainMu.Lock()
		p.drainRing(d, m, false)
		p.drainMu.Unlock()
		take()
	}
	releaseAll := func() {
		for _, b := range held {
			release(b)
		}
		held = nil
	}
	releaseAll()
	p.drainMu.Lock()
	p.drainRing(d, m, true)
	p.drainMu.Unlock()
	take()
	releaseAll()
	if log.Len() > 0 {
		t.Fatalf("the session logged:\n%s", log.String())
	}
	if (m.second != nil) != ahead {
		t.Fatalf("second mirror made: %v, want %v", m.second != nil, ahead)
	}
	if dropped == 0 {
		t.Fatal("the ring never filled: the test does not exercise drops")
	}
	for i := 1; i < len(got); i++ {
		if got[i] != got[i-1]+1 {
			t.Fatalf("record %d after %d", got[i], got[i-1])
		}
	}
	rs := m.ring
	if uint64(len(got)) != produced-dropped || rs.produced.Load() != produced || rs.dropped.Load() != dropped || rs.pending.Load() != 0 {
		t.Fatalf("delivered %d, produced %d (ring says %d), dropped %d (ring says %d), pending %d",
			len(got), produced, rs.produced.Load(), dropped, rs.dropped.Load(), rs.pending.Load())
	}
	if f := rs.holds[0].freed(); f != pos {
		t.Fatalf("freed %d after every batch was released, want %d", f, pos)
	}
	if rs.drains.Load() < 60 {
		t.Fatalf("%d drains", rs.drains.Load())
	}
}
