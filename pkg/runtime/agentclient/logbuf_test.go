package agentclient

import (
	"strings"
	"sync"
	"time"
)

// logBuf holds a child's stderr. exec copies the pipe into it from its own
// goroutine, so a line the agent wrote before answering a request may not
// be here yet when the answer arrives: positive checks wait for it (has),
// and every read takes the lock the copy holds.
type logBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// has reports whether s reaches the log within a few seconds: long enough
// for a line already written to the pipe, on a loaded machine.
func (l *logBuf) has(s string) bool {
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if strings.Contains(l.String(), s) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}
