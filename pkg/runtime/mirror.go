package runtime

import (
	"encoding/binary"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/gpubpf/gpubpf/pkg/runtime/gpumap"
	"github.com/gpubpf/gpubpf/pkg/runtime/jit"
	"github.com/gpubpf/gpubpf/pkg/runtime/verify"
)

// A map shared with the CPU (type 1504, or an array CPU programs also use)
// lives in host memory, and every GPU update of it crosses the host link as
// a system-scope atomic: x3.5 at 16k threads, x919 at a million (H100,
// one update per warp; issue 47). When the GPU programs only add to it
// (jit.AddOnlyMaps), their adds go to a mirror in device memory instead,
// started at zero, at the GPU's own speed; the tool adds what the mirror
// gained to the kernel's map with CPU atomics (fold): every FoldEvery while
// the program runs, at each read of the map, and at the last look. The CPU
// sees the GPU's adds up to FoldEvery late, never lost or counted twice.
// GPUBPF_SHARED_MAPS=direct keeps every update on the host link, as before.
const FoldEvery = 100 * time.Millisecond

// mirror is the fold state of one shared map in one context.
type mirror struct {
	width int    // bytes per add: 4 or 8; 0: the GPU only looks it up
	host  []byte // the kernel map's values, mapped in the tool
	mu    sync.Mutex
	last  []byte // the device copy as of the last fold
	fails bool   // a fold failed (said once)
}

// mirroredMaps picks the shared maps that get a mirror: every GPU program
// that uses one only adds to it, all with one width. The launch-words map
// is read by the agent: never mirrored.
func mirroredMaps(gpu []GPUProgram, shared map[string]bool, launchWords string) (map[string]int, error) {
	if len(shared) == 0 || os.Getenv("GPUBPF_SHARED_MAPS") == "direct" {
		return nil, nil // nothing to analyse at start-up
	}
	width := map[string]int{}
	refused := map[string]bool{}
	for _, g := range gpu {
		adds, err := jit.AddOnlyMaps(g.Spec.Instructions)
		if err != nil {
			return nil, fmt.Errorf("GPU program %s: %w", g.Spec.Name, err)
		}
		for _, name := range verify.ReferencedMaps(g.Spec) {
			if !shared[name] || name == launchWords {
				continue
			}
			w, ok := adds[name]
			switch old := width[name]; {
			case !ok:
				refused[name] = true
			case w != 0 && old != 0 && w != old:
				refused[name] = true
			case w != 0:
				width[name] = w
			default:
				width[name] = old
			}
		}
	}
	for name := range refused {
		delete(width, name)
	}
	return width, nil
}

// hostView maps the values of shared kernel map name into the tool, once
// per session: the folds add to it.
func (s *Session) hostView(name string, km *ebpf.Map, size uint64) ([]byte, error) {
	s.viewMu.Lock()
	defer s.viewMu.Unlock()
	if b, ok := s.hostViews[name]; ok {
		return b, nil
	}
	b, err := unix.Mmap(km.FD(), 0, int(pageRound(size)), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mapping the kernel's map %s into the tool: %w", name, err)
	}
	if s.hostViews == nil {
		s.hostViews = map[string][]byte{}
	}
	s.hostViews[name] = b
	return b, nil
}

// unmapHostViews lets go of the folds' mappings once no process folds.
func (s *Session) unmapHostViews() {
	s.viewMu.Lock()
	defer s.viewMu.Unlock()
	for name, b := range s.hostViews {
		unix.Munmap(b)
		delete(s.hostViews, name)
	}
}

// placeMirror places shared map name's mirror in d's context: zeroed
// device memory in the kernel map's layout, which the GPU programs get as
// the map (device-scope atomics).
func (d *device) placeMirror(name string, spec *ebpf.MapSpec, km *ebpf.Map, width int) (*placedMap, error) {
	size := uint64(spec.MaxEntries) * gpumap.Stride(spec.ValueSize)
	host, err := d.p.s.hostView(name, km, size)
	if err != nil {
		return nil, err
	}
	conn := d.p.conn
	addr, err := conn.Alloc(d.target, size)
	if err != nil {
		return nil, err
	}
	if err := conn.Memset(d.target, addr, 0, size); err != nil {
		conn.Free(d.target, addr)
		return nil, err
	}
	d.p.s.logf("map %s (shared with the CPU): the GPU only adds to it, so its adds gather in device memory and reach the CPU's copy every %v, at each read and at the end", name, FoldEvery)
	return &placedMap{name: name, spec: spec, kmap: km, devAddr: addr,
		mirror: &mirror{width: width, host: host[:size], last: make([]byte, size)},
		place: gpumap.Placement{Kind: gpumap.HostArray, Addr: addr,
			KeySize: spec.KeySize, ValueSize: spec.ValueSize, MaxEntries: spec.MaxEntries}}, nil
}

// fold adds what every mirror of p gained since its last fold to the
// kernel's maps. live: read the mirrors as they are now (the program
// running); else after the launches issued so far (a read, the end).
func (p *Process) fold(live bool) {
	for _, d := range p.placed() {
		for _, name := range sortedKeys(d.maps) {
			if m := d.maps[name]; m.mirror != nil && m.mirror.width != 0 {
				p.foldOne(d, m, live)
			}
		}
	}
}

func (p *Process) foldOne(d *device, m *placedMap, live bool) {
	mr := m.mirror
	mr.mu.Lock()
	defer mr.mu.Unlock()
	var cur []byte
	var err error
	if live {
		cur, err = p.readLive(d, m)
	} else {
		cur, err = p.readDevice(d.target, m.devAddr, uint64(len(mr.last)))
	}
	if err != nil || len(cur) != len(mr.last) {
		select {
		case <-p.conn.Done():
			return // gone: its last look folded what it had
		default:
		}
		if !mr.fails && err != errDetached {
			mr.fails = true
			p.s.logf("process %d: adding the GPU's updates of map %s to the CPU's copy: %v", p.PID, m.name, err)
		}
		return
	}
	addDeltas(mr.host, mr.last, cur, mr.width)
	mr.last = cur
	p.s.folds.Add(1)
}

// addDeltas adds cur - last, word by word of width bytes (modulo the
// word: a sum the GPU wrapped wraps the same in the CPU's copy), to host
// with atomic adds, which commute with the CPU programs' own.
func addDeltas(host, last, cur []byte, width int) {
	ne := binary.NativeEndian
	switch width {
	case 8:
		for off := 0; off+8 <= len(cur); off += 8 {
			if d := ne.Uint64(cur[off:]) - ne.Uint64(last[off:]); d != 0 {
				atomic.AddUint64((*uint64)(unsafe.Pointer(&host[off])), d)
			}
		}
	case 4:
		for off := 0; off+4 <= len(cur); off += 4 {
			if d := ne.Uint32(cur[off:]) - ne.Uint32(last[off:]); d != 0 {
				atomic.AddUint32((*uint32)(unsafe.Pointer(&host[off])), d)
			}
		}
	}
}

// folding says whether the session folds: a mirrored map the GPU writes
// (mirrored is set once, at Open).
func (s *Session) folding() bool {
	for _, w := range s.mirrored {
		if w != 0 {
			return true
		}
	}
	return false
}
