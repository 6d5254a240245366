package graphs

import "github.com/gpubpf/gpubpf/pkg/runtime/agentproto"

// Stamps joins the runs of kernel nodes the agent swapped into executable
// graphs with the stamps of the graph launches that ran them, for one
// process (see agentproto.GraphStamps): the probe of such a node records
// its id and run index instead of a stamp, which costs the application no
// stream operation per graph launch.
type Stamps struct {
	ids   map[uint32]agentproto.GraphSeqID
	rings map[uint32]*ring
	// Lost counts the launches whose stamps the agent overwrote before
	// they were read (a tool that fell behind): their runs stay untimed.
	Lost uint64
}

// ring is one exec's stamps from launch number first on.
type ring struct {
	first uint64
	st    []uint64
}

// keepFor: stamps older than this before a ring's newest are let go. The
// tool joins a run within a read or two of the start table (at most a
// second apart), and a launch runs within the GPU's queue of it.
const keepFor = 3_000_000_000 // ns

// maxGap: launches lost between two replies that are held as zeros (the
// stamps before them still join); past it a ring starts afresh.
const maxGap = 1 << 20

// NewStamps is an empty join.
func NewStamps() *Stamps {
	return &Stamps{ids: map[uint32]agentproto.GraphSeqID{}, rings: map[uint32]*ring{}}
}

// Add takes what the agent sent since its last reply.
func (s *Stamps) Add(r agentproto.GraphStamps) {
	for _, id := range r.IDs {
		s.ids[id.ID] = id
	}
	for _, run := range r.Runs {
		s.Lost += run.Lost
		rg := s.rings[run.Ring]
		if rg == nil {
			rg = &ring{first: run.First}
			s.rings[run.Ring] = rg
		}
		next := rg.first + uint64(len(rg.st))
		st := run.Stamps
		switch {
		case run.First > next+maxGap:
			// a long run of launches lost: start afresh
			rg.first, rg.st = run.First, rg.st[:0]
		case run.First > next:
			// launches lost in between: their runs find no stamp (0)
			rg.st = append(rg.st, make([]uint64, run.First-next)...)
		case run.First < next:
			// sent before (not by this agent): keep the first copy
			skip := next - run.First
			if skip >= uint64(len(st)) {
				continue
			}
			st = st[skip:]
		}
		rg.st = append(rg.st, st...)
		rg.trim()
	}
}

// trim lets go of the stamps older than keepFor before the newest (the
// array behind them goes at append's next growth).
func (rg *ring) trim() {
	if len(rg.st) == 0 {
		return
	}
	newest := rg.st[len(rg.st)-1]
	drop := 0
	for drop < len(rg.st) && rg.st[drop]+keepFor < newest {
		drop++
	}
	rg.first += uint64(drop)
	rg.st = rg.st[drop:]
}

// Stamp is the stamp (CLOCK_MONOTONIC ns) of the graph launch that ran run
// idx of node id; false when the run is past the node's epoch (the exec's
// nodes changed after it, so run idx is not launch base + idx), or its
// stamp is gone or not known.
func (s *Stamps) Stamp(id uint32, idx uint64) (uint64, bool) {
	x, ok := s.ids[id]
	if !ok || idx >= x.End-x.Base {
		return 0, false
	}
	rg := s.rings[x.Ring]
	n := x.Base + idx
	if rg == nil || n < rg.first || n-rg.first >= uint64(len(rg.st)) {
		return 0, false
	}
	return rg.st[n-rg.first], rg.st[n-rg.first] != 0
}
