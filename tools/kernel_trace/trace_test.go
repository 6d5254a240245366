package main

import (
	"encoding/binary"
	"testing"

	"github.com/gpubpf/gpubpf/pkg/toolkit"
)

func TestParseRange(t *testing.T) {
	for _, c := range []struct {
		in     string
		lo, hi uint64
		ok     bool
	}{{"", 0, ^uint64(0), true}, {"3", 3, 3, true}, {"0-31", 0, 31, true}, {"5-2", 0, 0, false}, {"x", 0, 0, false}, {"1-", 0, 0, false}} {
		lo, hi, err := parseRange("block", c.in)
		if (err == nil) != c.ok || c.ok && (lo != c.lo || hi != c.hi) {
			t.Errorf("parseRange(%q) = %d, %d, %v", c.in, lo, hi, err)
		}
	}
}

func rec(ts uint64, grid uint64, bx, tx, sm uint32) []byte {
	b := make([]byte, 56)
	binary.LittleEndian.PutUint64(b, ts)
	binary.LittleEndian.PutUint64(b[8:], grid)
	binary.LittleEndian.PutUint32(b[16:], bx)
	binary.LittleEndian.PutUint32(b[28:], tx)
	binary.LittleEndian.PutUint32(b[40:], sm)
	return b
}

// TestLaunchSummary: two blocks on SM 0 and one on SM 1 starting 300 ns
// later: 3 blocks, blocks per SM 1-2, last SM +300 ns, spread 400 ns.
func TestLaunchSummary(t *testing.T) {
	l := &launch{smFirst: map[uint32]uint64{}, smBlocks: map[uint32]map[uint64]struct{}{}}
	for _, r := range [][]byte{rec(1000, 7, 0, 0, 0), rec(1100, 7, 1, 0, 0), rec(1300, 7, 2, 0, 1), rec(1400, 7, 2, 1, 1)} {
		e, _ := toolkit.DecodeThreadEvent(r)
		l.add(e)
	}
	bmin, bmax, lastSM := l.summary()
	if l.threads != 4 || l.last-l.first != 400 || bmin != 1 || bmax != 2 || lastSM != 300 {
		t.Fatalf("threads %d spread %d blocks/SM %d-%d last SM %d", l.threads, l.last-l.first, bmin, bmax, lastSM)
	}
}
