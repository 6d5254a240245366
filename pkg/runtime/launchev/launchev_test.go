package launchev

import (
	"encoding/binary"
	"math/rand"
	"testing"
)

// produce writes a record at position pos as the agent does: fields, then
// the sequence word last.
func produce(r *Ring, pos uint64, fn uint64) {
	off := headerSize + int(pos&(r.cap-1))*RecordSize
	le := binary.LittleEndian
	le.PutUint64(r.mem[off:], 1000+pos)
	le.PutUint64(r.mem[off+16:], fn)
	le.PutUint32(r.mem[off+72:], uint32(LaunchKernelEx))
	le.PutUint32(r.mem[off+76:], uint32(pos+1))
}

func TestReadInOrderAcrossLaps(t *testing.T) {
	r, err := New(3) // rounds up to 4
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.cap != 4 || r.Size() != headerSize+4*RecordSize {
		t.Fatalf("cap %d size %d", r.cap, r.Size())
	}
	var got []uint64
	read := func() { r.Read(func(rec *Record) { got = append(got, rec.Func) }) }
	for pos := uint64(0); pos < 3; pos++ {
		produce(r, pos, 0x100+pos)
	}
	read()
	// position 4 is published before 3 (two threads, the first slower):
	// nothing past the gap is handed out until 3 lands
	produce(r, 4, 0x104)
	read()
	if len(got) != 3 {
		t.Fatalf("read past an unpublished slot: %x", got)
	}
	produce(r, 3, 0x103)
	read()
	for i, fn := range got {
		if fn != 0x100+uint64(i) {
			t.Fatalf("records out of order: %x", got)
		}
	}
	if len(got) != 5 {
		t.Fatalf("%d records, want 5", len(got))
	}
}

// Whatever the program writes into the shared pages, the reader neither
// panics nor hands out a slot whose sequence word is not the awaited one.
func TestReadSurvivesScribbles(t *testing.T) {
	r, err := New(16)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rng := rand.New(rand.NewSource(1))
	for round := 0; round < 200; round++ {
		rng.Read(r.mem)
		before := r.tail
		r.Read(func(rec *Record) {
			if rec.Sequence < before {
				t.Fatalf("went back: %d < %d", rec.Sequence, before)
			}
		})
		_, _ = r.Dropped(), r.Claimed()
	}
}
