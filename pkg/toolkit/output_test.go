package toolkit

import (
	"bytes"
	"testing"
	"time"
)

func TestOutputHelpers(t *testing.T) {
	if got := string(AppendClock(nil, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))); got != "03:04:05" {
		t.Errorf("AppendClock = %q", got)
	}
	var b bytes.Buffer
	StartLine(&b, "Tracing CUDA calls in PID 1")
	if b.String() != "Tracing CUDA calls in PID 1... Hit Ctrl-C to end.\n" {
		t.Errorf("StartLine = %q", b.String())
	}
	a := Account{Tool: "x"}
	a.Add(10, "events", "")
	a.Add(2, "dropped", "ring buffer full")
	a.Note("command exited with status 0")
	if got := a.String(); got != "x: 10 events, 2 dropped (ring buffer full), command exited with status 0" {
		t.Errorf("Account = %q", got)
	}
	if got := string(AppendJSONString(nil, "tab\there \xff")); got != `"tab\there \ufffd"` {
		t.Errorf("AppendJSONString = %s", got)
	}
}
