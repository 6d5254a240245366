package runtime

import (
	"testing"

	"github.com/gpubpf/gpubpf/pkg/runtime/gpumap"
)

// What the GPU may write again follows the tool's releases: up to the
// oldest batch still held, whatever order the tool releases them in; with
// none held, up to where the scan handed records out.
func TestRingHoldFreed(t *testing.T) {
	_, mem, err := sharedMemory("hold-test", 4096)
	if err != nil {
		t.Fatal(err)
	}
	pm := &placedMap{name: "hold-test", mem: mem}
	h := &ringHold{pm: pm}
	run := func(pos uint64) *gpumap.Run {
		return &gpumap.Run{Mem: mem[pos : pos+48], Pos: pos, Starts: []uint32{8}, Ends: []uint32{48}}
	}
	a := runBatch(1, 0, "events", h, run(0))
	b := runBatch(1, 0, "events", h, run(48))
	c := runBatch(1, 0, "events", h, run(96))
	h.handedTo(144)
	if got := h.freed(); got != 0 {
		t.Fatalf("three batches held: freed %d, want 0", got)
	}
	if a.Len() != 1 || len(a.Record(0)) != 40 || &a.Record(0)[0] != &mem[8] {
		t.Fatal("a batch in place does not point at its record in the mirror")
	}
	b.Release()
	if got := h.freed(); got != 0 {
		t.Fatalf("the oldest batch still held: freed %d, want 0", got)
	}
	a.Release()
	if got := h.freed(); got != 96 {
		t.Fatalf("the first two released: freed %d, want 96", got)
	}
	a.Release() // a second release of a recycled batch changes nothing
	if got := h.freed(); got != 96 {
		t.Fatalf("after a double release: freed %d, want 96", got)
	}
	c.Release()
	if got := h.freed(); got != 144 {
		t.Fatalf("all released: freed %d, want 144 (handed out)", got)
	}
	d := runBatch(1, 0, "events", h, run(144))
	if got := h.freed(); got != 144 {
		t.Fatalf("a new batch at 144: freed %d", got)
	}

	// A holder that keeps records long takes a copy: the ring's space is
	// free again at once.
	e := runBatch(1, 0, "events", h, run(192))
	mem[192+8] = 42
	kept := e.detach()
	if got := h.freed(); got != 144 || kept.hold != nil || kept.Len() != 1 || kept.Record(0)[0] != 42 || &kept.Record(0)[0] == &mem[200] {
		t.Fatalf("detached: freed %d, in place %v, %d records", got, kept.hold != nil, kept.Len())
	}

	// The map released while a batch is held keeps its mirror mapped
	// until the batch is released.
	pm.unmap()
	if pm.mem == nil {
		t.Fatal("unmapped under a held batch")
	}
	_ = d.Record(0)[0]
	d.Release()
	if pm.mem != nil || pm.refs.Load() != 0 {
		t.Fatalf("the last release after the unmap left the mirror mapped (refs %d)", pm.refs.Load())
	}
}
