package testenv

import (
	"strings"
	"sync"
	"time"
)

// LogBuffer holds a child process's stderr (cmd.Stderr = &buf): exec copies
// the pipe into it from a goroutine of its own, so every read takes the
// lock the copy holds, and a line the child wrote before it answered the
// test may still be in the pipe: Has waits for it.
type LogBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Has reports whether s reaches the buffer within a few seconds (long
// enough for a line already in the pipe, on a loaded machine).
func (l *LogBuffer) Has(s string) bool {
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if strings.Contains(l.String(), s) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}
