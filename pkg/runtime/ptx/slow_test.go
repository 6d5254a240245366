package ptx

import (
	"strings"
	"testing"
	"time"
)

// Inputs that would make a careless lexer quadratic must stay linear.
func TestPathologicalInputsStayFast(t *testing.T) {
	for _, s := range []string{strings.Repeat("a:", 100000), strings.Repeat(".x a\n", 100000), ".b8 x = " + strings.Repeat("{", 100000), strings.Repeat("{", 50000) + strings.Repeat("}", 50000), ".entry k(){" + strings.Repeat("{", 50000) + strings.Repeat("}", 50000) + "}", strings.Repeat(".global .u32 a", 100000) + ";", ".func " + strings.Repeat(".func ", 100000), strings.Repeat("/*", 100000), strings.Repeat("\"", 100000), strings.Repeat(".section a {", 10000)} {
		t0 := time.Now()
		Parse(s)
		if d := time.Since(t0); d > 2*time.Second {
			t.Errorf("%.20q: %v", s, d)
		}
	}
}
