package launchlate

import (
	"errors"
	"testing"
	"time"
)

// When the start table is read: a table that fills slowly once per
// readQuiet, one that has taken an eighth of its graph part since the last
// read at once (the count is one word), and with --events, a report, or a
// count that cannot be read, every time.
func TestTableDue(t *testing.T) {
	var count uint64
	var countErr error
	l := &launchlate{recordedNow: func() (uint64, error) { return count, countErr }}
	t0 := time.Unix(1000, 0)
	read := func(now time.Time) { // as poll does after a read
		l.recordedAtRead, l.nextRead = l.recorded, now.Add(readQuiet)
	}
	if !l.tableDue(t0, false) {
		t.Fatal("the first tick reads nothing")
	}
	read(t0)
	for _, tc := range []struct {
		name   string
		after  time.Duration
		count  uint64
		report bool
		err    error
		want   bool
	}{
		{"100 starts in 100 ms", 100 * time.Millisecond, 100, false, nil, false},
		{"a report", 200 * time.Millisecond, 200, true, nil, true},
		{"slowly, not yet a second after the report's read", readQuiet, 1000, false, nil, false},
		{"slowly, a second after it", readQuiet + 200*time.Millisecond, 1000, false, nil, true},
		{"a burst: an eighth of the graph part", readQuiet + 300*time.Millisecond, 1000 + graphSlots/8, false, nil, true},
		{"quiet after it", readQuiet + 400*time.Millisecond, 1000 + graphSlots/8, false, nil, false},
		{"a traced process gone: the count falls", readQuiet + 500*time.Millisecond, 10, false, nil, false},
		{"then an eighth more than that", readQuiet + 600*time.Millisecond, 10 + graphSlots/8, false, nil, true},
		{"the count unreadable", readQuiet + 700*time.Millisecond, 10, false, errors.New("agent gone"), true},
	} {
		count, countErr = tc.count, tc.err
		now := t0.Add(tc.after)
		if got := l.tableDue(now, tc.report); got != tc.want {
			t.Errorf("%s: due %v, want %v", tc.name, got, tc.want)
		} else if got {
			read(now)
		}
	}
	l.events = true
	if count, countErr = 10, nil; !l.tableDue(t0.Add(readQuiet+800*time.Millisecond), false) {
		t.Errorf("--events: not read at every tick")
	}
}
