// Package cudawatch finds the CUDA processes of the host for the tools'
// --all: the ones running now (they map libcuda) and each new one as it
// initialises CUDA, from a uprobe on libcuda's cuInit that every process
// mapping the library reaches, so nothing reads /proc in a loop.
package cudawatch

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
)

// Libraries are the libcuda files of the host: ldconfig's, the usual
// places, and those mapped by running processes, one per file (a file seen
// under two names, as a container's bind mount of the host's is, once).
func Libraries() []string {
	var cands []string
	if out, err := exec.Command("ldconfig", "-p").Output(); err == nil {
		for _, l := range strings.Split(string(out), "\n") {
			if strings.Contains(l, "libcuda.so.1 ") {
				if _, p, ok := strings.Cut(l, "=> "); ok {
					cands = append(cands, strings.TrimSpace(p))
				}
			}
		}
	}
	cands = append(cands, "/usr/lib/x86_64-linux-gnu/libcuda.so.1", "/usr/lib64/libcuda.so.1", "/usr/local/nvidia/lib64/libcuda.so.1",
		"/usr/lib/aarch64-linux-gnu/libcuda.so.1")
	for _, pid := range pids() {
		if p := mappedLibcuda(pid); p != "" {
			cands = append(cands, fmt.Sprintf("/proc/%d/root%s", pid, p))
		}
	}
	var out []string
	seen := map[[2]uint64]bool{}
	for _, c := range cands {
		st, err := os.Stat(c)
		if err != nil {
			continue
		}
		sys, ok := st.Sys().(*syscall.Stat_t)
		if !ok {
			continue
		}
		k := [2]uint64{sys.Dev, sys.Ino}
		if !seen[k] {
			seen[k] = true
			out = append(out, c)
		}
	}
	return out
}

// Running lists the processes that map a libcuda now.
func Running() []int {
	var out []int
	for _, pid := range pids() {
		if mappedLibcuda(pid) != "" {
			out = append(out, pid)
		}
	}
	return out
}

func pids() []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var out []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil && pid != self {
			out = append(out, pid)
		}
	}
	return out
}

// mappedLibcuda is the path (in the process's mount namespace) of the
// libcuda process pid maps, or "".
func mappedLibcuda(pid int) string {
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		i := strings.IndexByte(l, '/')
		if i < 0 {
			continue
		}
		if base := filepath.Base(l[i:]); strings.HasPrefix(base, "libcuda.so") {
			return l[i:]
		}
	}
	return ""
}

// Watcher reports the processes that call cuInit (Start).
type Watcher struct {
	done chan error
}

// Done delivers nil when the watch ended with its context, or why it
// failed.
func (w *Watcher) Done() <-chan error { return w.done }

// Start attaches the uprobe on cuInit in each of libs and, until ctx ends,
// calls found with the pid of each process that calls it (on the watch's
// goroutine: it may take its time; calls wait in a ring of 16k). It fails
// when no library takes the uprobe; on return the watch is on.
func Start(ctx context.Context, libs []string, found func(pid int)) (*Watcher, error) {
	var objs cudainitObjects
	if err := loadCudainitObjects(&objs, nil); err != nil {
		return nil, fmt.Errorf("loading the cuInit watch: %w", err)
	}
	var links []link.Link
	closeAll := func() {
		for _, l := range links {
			l.Close()
		}
		objs.Close()
	}
	var errs []error
	for _, lib := range libs {
		ex, err := link.OpenExecutable(lib)
		if err == nil {
			var l link.Link
			if l, err = ex.Uprobe("cuInit", objs.Cuinit, nil); err == nil {
				links = append(links, l)
				continue
			}
		}
		errs = append(errs, fmt.Errorf("%s: %w", lib, err))
	}
	if len(links) == 0 {
		closeAll()
		if len(errs) == 0 {
			return nil, errors.New("no libcuda found on this host (ldconfig -p, /usr/lib*, /usr/local/nvidia/lib64, running processes)")
		}
		return nil, fmt.Errorf("watching cuInit: %w", errors.Join(errs...))
	}
	rd, err := ringbuf.NewReader(objs.Inits)
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("watching cuInit: %w", err)
	}
	w := &Watcher{done: make(chan error, 1)}
	go func() {
		<-ctx.Done()
		rd.Close()
	}()
	go func() {
		defer closeAll()
		for {
			rec, err := rd.Read()
			if err != nil {
				if errors.Is(err, os.ErrClosed) || ctx.Err() != nil {
					err = nil
				} else {
					err = fmt.Errorf("watching cuInit: %w", err)
				}
				w.done <- err
				return
			}
			if len(rec.RawSample) >= 4 {
				found(int(binary.LittleEndian.Uint32(rec.RawSample)))
			}
		}
	}()
	return w, nil
}
