package runtime

import (
	"testing"
	"time"

	"github.com/gpubpf/gpubpf/pkg/runtime/gpumap"
)

// A program's rings get Options' size and wait bound (--no-drop), in the
// microseconds the control block holds.
func TestRingPlacement(t *testing.T) {
	for _, tc := range []struct {
		wait time.Duration
		want uint32
	}{
		{0, 0},
		{100 * time.Millisecond, 100000},
		{1500 * time.Nanosecond, 1},
		{-time.Second, 0},
		{100 * time.Hour, 1<<32 - 1},
	} {
		pl := Options{RingBytes: 1 << 24, RingWait: tc.wait}.ringPlacement(gpumap.Placement{Kind: gpumap.RingBuf, MaxEntries: 4096})
		if pl.RingSize != 1<<24 || pl.WaitMicros != tc.want || pl.MaxEntries != 4096 {
			t.Errorf("RingWait %v: %+v, want ring size 16 MiB and a bound of %d us", tc.wait, pl, tc.want)
		}
	}
}
