package ptx

import (
	"fmt"
	"strings"
	"testing"
)

// pathological are inputs that would make a careless lexer quadratic.
var pathological = []string{
	strings.Repeat("a:", 100000), strings.Repeat(".x a\n", 100000), ".b8 x = " + strings.Repeat("{", 100000),
	strings.Repeat("{", 50000) + strings.Repeat("}", 50000), ".entry k(){" + strings.Repeat("{", 50000) + strings.Repeat("}", 50000) + "}",
	strings.Repeat(".global .u32 a", 100000) + ";", ".func " + strings.Repeat(".func ", 100000), strings.Repeat("/*", 100000),
	strings.Repeat("\"", 100000), strings.Repeat(".section a {", 10000),
}

// Every pathological input comes back, parsed or refused, without a panic.
// How fast is BenchmarkPathologicalInputs' question (make bench): a test
// that times itself fails on a busy machine.
func TestPathologicalInputs(t *testing.T) {
	for _, s := range pathological {
		if m, err := Parse(s); m == nil && err == nil {
			t.Errorf("%.20q: neither a module nor an error", s)
		}
	}
}

// BenchmarkPathologicalInputs reports each pathological input's parse time
// per input byte. Goal: under 1 us a byte for each (linear: a quadratic
// lexer takes about n times longer on these inputs of 100k-1M bytes).
func BenchmarkPathologicalInputs(b *testing.B) {
	for i, s := range pathological {
		b.Run(fmt.Sprintf("%d-%.12q", i, s), func(b *testing.B) {
			b.SetBytes(int64(len(s)))
			for range b.N {
				Parse(s)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(s)), "ns/byte")
		})
	}
}
