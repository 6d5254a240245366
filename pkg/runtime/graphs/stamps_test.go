package graphs

import (
	"testing"

	"github.com/gpubpf/gpubpf/pkg/runtime/agentproto"
)

func TestStamps(t *testing.T) {
	const open = agentproto.GraphSeqOpen
	s := NewStamps()
	s.Add(agentproto.GraphStamps{
		IDs: []agentproto.GraphSeqID{{ID: 1, Ring: 7, Base: 0, End: open}, {ID: 2, Ring: 7, Base: 1, End: 3},
			{ID: 3, Ring: 8, Base: 0, End: open}},
		Runs: []agentproto.GraphStampRun{{Ring: 7, First: 0, Stamps: []uint64{10, 20, 30, 40}}},
	})
	// a later reply: launches 4-5 of ring 7 lost, 6-7 sent; 5-7 of ring
	// 8 with 5 sent twice (the agent never does; kept once)
	s.Add(agentproto.GraphStamps{Runs: []agentproto.GraphStampRun{
		{Ring: 7, First: 6, Lost: 2, Stamps: []uint64{70, 80}},
		{Ring: 8, First: 5, Stamps: []uint64{50}},
	}})
	s.Add(agentproto.GraphStamps{Runs: []agentproto.GraphStampRun{{Ring: 8, First: 5, Stamps: []uint64{55, 60}}}})
	for _, c := range []struct {
		id   uint32
		idx  uint64
		want uint64 // 0: not found
	}{
		{1, 0, 10}, {1, 3, 40},
		{1, 4, 0}, // lost
		{1, 6, 70}, {1, 7, 80},
		{1, 8, 0},  // not launched yet
		{2, 0, 20}, // launch 1
		{2, 1, 30}, // launch 2
		{2, 2, 0},  // past its epoch: launch 3 ran other nodes
		{3, 5, 50}, // the first copy
		{3, 6, 60}, //
		{3, 0, 0},  // before the ring's first
		{4, 0, 0},  // an id not told
	} {
		got, ok := s.Stamp(c.id, c.idx)
		if got != c.want || ok != (c.want != 0) {
			t.Errorf("Stamp(%d, %d) = %d, %v; want %d", c.id, c.idx, got, ok, c.want)
		}
	}
	if s.Lost != 2 {
		t.Errorf("lost %d, want 2", s.Lost)
	}
	// an epoch ended later: told again with its end
	s.Add(agentproto.GraphStamps{IDs: []agentproto.GraphSeqID{{ID: 1, Ring: 7, Base: 0, End: 7}}})
	if _, ok := s.Stamp(1, 7); ok {
		t.Error("run 7 of an epoch that ended at launch 7 was joined")
	}
}

// Stamps older than keepFor before a ring's newest go.
func TestStampsKeep(t *testing.T) {
	s := NewStamps()
	s.Add(agentproto.GraphStamps{IDs: []agentproto.GraphSeqID{{ID: 1, Ring: 1, End: agentproto.GraphSeqOpen}}})
	for i := uint64(0); i < 10; i++ {
		s.Add(agentproto.GraphStamps{Runs: []agentproto.GraphStampRun{{Ring: 1, First: i,
			Stamps: []uint64{1 + i*1_000_000_000}}}})
	}
	for i := uint64(0); i < 10; i++ {
		_, ok := s.Stamp(1, i)
		if want := i >= 6; ok != want { // the newest is at 9 s: 6 s on are within 3 s of it
			t.Errorf("launch %d kept: %v, want %v", i, ok, want)
		}
	}
}
