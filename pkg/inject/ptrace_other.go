//go:build !amd64

package inject

import (
	"fmt"
	"runtime"

	"github.com/gpubpf/gpubpf/pkg/procmaps"
)

func inject(pid int, lib string, fns *functions, ms procmaps.Maps, opts Options) (*Result, error) {
	return nil, fmt.Errorf("%w: loading the agent into a running process is implemented for x86-64 only, not %s; start the program with LD_PRELOAD set to the agent instead", ErrUnsupported, runtime.GOARCH)
}
