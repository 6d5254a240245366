package toolkit

import (
	"fmt"
	"github.com/gpubpf/gpubpf/pkg/promexport"
	"io"
	"strings"
	"time"
	"unsafe"

	"github.com/gpubpf/gpubpf/pkg/btffmt"
)

// Output helpers shared by the tools: the start line, -T clock stamps, JSON
// string encoding for hand-built JSON lines (encoding/json costs several
// allocations per object; event streams print millions of lines), and the
// final completeness account of CLI.md.

// StartLine prints the bcc-style start line on w (stderr).
func StartLine(w io.Writer, what string) {
	fmt.Fprintf(w, "%s... Hit Ctrl-C to end.\n", what)
}

// AppendClock appends t as HH:MM:SS (the -T column).
func AppendClock(b []byte, t time.Time) []byte {
	h, m, s := t.Clock()
	return append(b, byte('0'+h/10), byte('0'+h%10), ':', byte('0'+m/10), byte('0'+m%10), ':', byte('0'+s/10), byte('0'+s%10))
}

// AppendJSONString appends s as a quoted JSON string (btffmt's encoder,
// byte for byte what encoding/json writes, without HTML escapes).
func AppendJSONString(b []byte, s string) []byte {
	// The encoder only reads s: view the string's bytes without a copy.
	return btffmt.AppendJSONString(b, unsafe.Slice(unsafe.StringData(s), len(s)))
}

// Account is the one-line completeness account every tool ends with:
// "gpuevent_snoop: 1200 events, 0 dropped (ring buffer full), ...".
type Account struct {
	Tool   string
	parts  []string
	counts []accountCount
}

type accountCount struct {
	what string
	n    uint64
}

// Add appends one "N what" clause; why, if set, goes in parentheses.
func (a *Account) Add(n uint64, what, why string) {
	s := fmt.Sprintf("%d %s", n, what)
	if why != "" {
		s += " (" + why + ")"
	}
	a.parts = append(a.parts, s)
	a.counts = append(a.counts, accountCount{what, n})
}

// Export sets the account's counts in e (--prometheus, --otlp):
// gpubpf_TOOL_account{what="kernel starts timed"} and so on, one per
// clause with a number, so a fleet sees what each trace left out.
func (a *Account) Export(e *promexport.Exporter) {
	if e == nil {
		return
	}
	g := e.Gauge("account", "The trace's completeness account: each counted clause of the tool's last line, by what it counts.", "what")
	for _, c := range a.counts {
		g.WithLabelValues(c.what).Set(float64(c.n))
	}
}

// Note appends a free-form clause.
func (a *Account) Note(s string) { a.parts = append(a.parts, s) }

// String renders the account line (no newline).
func (a *Account) String() string {
	return a.Tool + ": " + strings.Join(a.parts, ", ")
}
