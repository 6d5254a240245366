package toolkit

import (
	"strings"
	"testing"
)

func TestLog2Index(t *testing.T) {
	for _, c := range []struct {
		v    uint64
		want int
	}{{0, 0}, {1, 0}, {2, 1}, {3, 1}, {4, 2}, {1023, 9}, {1024, 10}, {^uint64(0), 63}} {
		if got := Log2Index(c.v); got != c.want {
			t.Errorf("Log2Index(%d) = %d, want %d", c.v, got, c.want)
		}
	}
}

// TestLog2HistPrint: bcc's layout, byte for byte (libbpf-tools print_log2_hist).
func TestLog2HistPrint(t *testing.T) {
	var h Log2Hist
	for _, v := range []uint64{1, 2, 3, 3, 5, 6, 7, 7} {
		h.Add(v)
	}
	var b strings.Builder
	h.Print(&b, "usecs")
	want := "" +
		"     usecs               : count    distribution\n" +
		"         0 -> 1          : 1        |**********                              |\n" +
		"         2 -> 3          : 3        |******************************          |\n" +
		"         4 -> 7          : 4        |****************************************|\n"
	if b.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
	}
	var empty Log2Hist
	b.Reset()
	empty.Print(&b, "usecs")
	if b.Len() != 0 || !empty.Empty() {
		t.Fatalf("empty histogram printed %q", b.String())
	}
}
