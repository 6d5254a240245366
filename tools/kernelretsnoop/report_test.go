package main

import (
	"testing"

	"github.com/gpubpf/gpubpf/pkg/toolkit"
)

// TestLateLaneMarked: lanes 0-30 exit with their warp, lane 31 ~750 ns
// later: lane 31 is marked and no other; with every lane on time, none.
func TestLateLaneMarked(t *testing.T) {
	const nb = toolkit.LinLogBuckets
	lane := make([]uint64, 2*32*nb) // two kernels
	ontime := make([]uint64, 2*shards*ontimePad)
	ontime[3*ontimePad] = 100 // kernel 0: 100 full warps on time
	for l := 0; l < 32; l++ {
		if l == 31 {
			lane[(32+l)*nb+59] = 100 // kernel 1: ~750 ns (bucket 59)
		} else {
			lane[(32+l)*nb+0] = 100
		}
	}
	spread := make([]uint64, 2*shards*nb)
	spread[(shards+5)*nb+59] = 10
	got := summarize(lane, ontime, spread)
	if len(got) != 2 {
		t.Fatalf("%d kernels", len(got))
	}
	if got[0].exits != 3200 || len(got[0].late) != 0 {
		t.Errorf("kernel 0: late lanes %v", got[0].late)
	}
	if len(got[1].late) != 1 || got[1].late[0] != 31 {
		t.Errorf("kernel 1: late lanes %v, want [31]", got[1].late)
	}
	if v := got[1].lanes[31].p50; v < 700 || v > 800 {
		t.Errorf("lane 31 median %d ns", v)
	}
	if got[1].exits != 3200 || got[1].spreadMax == 0 {
		t.Errorf("kernel 1: %+v", got[1])
	}
}
