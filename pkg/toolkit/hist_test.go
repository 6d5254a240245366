package toolkit

import (
	"strings"
	"testing"

	"github.com/cilium/ebpf"
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

// linlogBucket mirrors linlog_bucket of bpf/gputhread.h.
func linlogBucket(v uint64) int {
	if v < 16 {
		return int(v)
	}
	e := Log2Index(v)
	b := 16 + (e-4)*8 + int((v>>(e-3))&7)
	return min(b, LinLogBuckets-1)
}

// TestLinLog: every value falls in a bucket whose value is within 1/16 of
// it (half a bucket), and quantiles walk the buckets in order.
func TestLinLog(t *testing.T) {
	for _, v := range []uint64{0, 1, 15, 16, 17, 31, 32, 100, 750, 1000, 12345, 1 << 30, 1<<40 - 1} {
		b := linlogBucket(v)
		got := LinLogValue(b)
		if d := float64(got) - float64(v); d > float64(v)/16+1 || -d > float64(v)/16+1 {
			t.Errorf("value %d: bucket %d stands for %d", v, b, got)
		}
	}
	h := make([]uint64, LinLogBuckets)
	for v := uint64(1); v <= 100; v++ {
		h[linlogBucket(v*10)]++
	}
	if p50, n := LinLogQuantile(h, 0.5); n != 100 || p50 < 470 || p50 > 530 {
		t.Errorf("p50 of 10..1000 = %d (n %d)", p50, n)
	}
	if p99, _ := LinLogQuantile(h, 0.99); p99 < 930 || p99 > 1030 {
		t.Errorf("p99 of 10..1000 = %d", p99)
	}
}

func TestDecodeThreadEvent(t *testing.T) {
	b := make([]byte, ThreadEventSize)
	b[0], b[8], b[16], b[28], b[40], b[52] = 7, 9, 1, 2, 3, 4
	e, err := DecodeThreadEvent(b)
	if err != nil || e.TS != 7 || e.Grid != 9 || e.BlockX != 1 || e.ThreadX != 2 || e.Warp != 0 || e.SM != 3 || e.Kernel != 4 {
		t.Fatalf("%+v %v", e, err)
	}
	if _, err := DecodeThreadEvent(b[:10]); err == nil {
		t.Fatal("short record accepted")
	}
}

func TestSetVariables(t *testing.T) {
	spec := &ebpf.CollectionSpec{Variables: map[string]*ebpf.VariableSpec{"knob": {Name: "knob", Value: make([]byte, 4)}}}
	if err := SetVariables(spec, map[string]any{"knob": uint32(7)}); err != nil || spec.Variables["knob"].Value[0] != 7 {
		t.Fatalf("set: %v %v", err, spec.Variables["knob"].Value)
	}
	if err := SetVariables(spec, map[string]any{"other": uint32(1)}); err == nil || !strings.Contains(err.Error(), "no variable other") {
		t.Fatalf("missing variable: %v", err)
	}
	if err := SetVariables(spec, map[string]any{"knob": uint64(1)}); err == nil {
		t.Fatal("a value of the wrong size was accepted")
	}
}

func TestFormatNs(t *testing.T) {
	for ns, want := range map[uint64]string{0: "0 ns", 9999: "9999 ns", 12500: "12.5 us", 3_400_000: "3.40 ms", 1_200_000_000: "1.20 s"} {
		if got := FormatNs(ns); got != want {
			t.Errorf("FormatNs(%d) = %q, want %q", ns, got, want)
		}
	}
}
