package toolkit

import (
	"fmt"
	"io"
	"math/bits"
	"strings"
)

// Log2Index is the bcc log2 bucket of v: bucket i holds 2^i .. 2^(i+1)-1,
// bucket 0 also holds 0.
func Log2Index(v uint64) int {
	if v == 0 {
		return 0
	}
	return bits.Len64(v) - 1
}

// Log2Hist is a bcc-style log2 histogram.
type Log2Hist [64]uint64

// Add counts v.
func (h *Log2Hist) Add(v uint64) { h[Log2Index(v)]++ }

// Empty reports whether nothing was counted.
func (h *Log2Hist) Empty() bool {
	for _, c := range h {
		if c != 0 {
			return false
		}
	}
	return true
}

// Print writes the histogram in bcc's layout (libbpf-tools'
// print_log2_hist): a header naming unit, then one row per bucket up to the
// last non-empty one, with 40-character bars.
func (h *Log2Hist) Print(w io.Writer, unit string) {
	first, last := -1, -1
	var max uint64
	for i, c := range h {
		if c > 0 {
			last = i
			if first < 0 {
				first = i
			}
		}
		if c > max {
			max = c
		}
	}
	if last < 0 {
		return
	}
	// bcc widens the columns once values pass 2^32.
	idxWide := last > 32
	stars, pad, col, width := 40, 5, 19, 10
	if idxWide {
		stars, pad, col, width = 20, 15, 29, 20
	}
	fmt.Fprintf(w, "%*s%-*s : count    distribution\n", pad, "", col, unit)
	// Leading empty buckets are left out (bcc's strip_leading_zero).
	for i := first; i <= last; i++ {
		low, high := uint64(1)<<i, uint64(1)<<(i+1)-1
		if i == 0 {
			low = 0
		}
		if i == 63 {
			high = ^uint64(0)
		}
		n := int(uint64(stars) * h[i] / max)
		fmt.Fprintf(w, "%*d -> %-*d : %-8d |%s%s|\n", width, low, width, high, h[i], strings.Repeat("*", n), strings.Repeat(" ", stars-n))
	}
}
