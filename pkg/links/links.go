// Package links closes sets of BPF links quickly.
//
// Detaching a uprobe or uretprobe waits for an RCU grace period in the
// kernel (16-90 ms each, measured), so closing a tool's 100+ probes one
// after another kept it alive for seconds after the traced program had
// ended. Closed concurrently, the waits share grace periods.
package links

import (
	"errors"
	"sync"

	"github.com/cilium/ebpf/link"
)

// maxParallel bounds the goroutines (and OS threads blocked in close)
// used at once.
const maxParallel = 64

// CloseAll closes every link concurrently and returns the errors joined.
// Nil links are skipped.
func CloseAll(ls []link.Link) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		sem  = make(chan struct{}, maxParallel)
	)
	for _, l := range ls {
		if l == nil {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func(l link.Link) {
			defer func() { <-sem; wg.Done() }()
			if err := l.Close(); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}(l)
	}
	wg.Wait()
	return errors.Join(errs...)
}
