package runtime

import (
	"encoding/binary"
	"fmt"
	"strings"
	"time"

	"github.com/cilium/ebpf"

	"github.com/gpubpf/gpubpf/pkg/runtime/agentproto"
	"github.com/gpubpf/gpubpf/pkg/runtime/gpumap"
)

// pollInterval is how often the tool drains the rings. At the ring's 1 MiB
// default and 32-byte records that is room for ~32k records per interval
// before the GPU starts counting drops.
const pollInterval = 2 * time.Millisecond

// poll delivers ring records to the session until the process detaches.
func (p *Process) poll() {
	defer p.wg.Done()
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			p.drain()
		}
	}
}

// drain hands every committed record of every ring to the session.
func (p *Process) drain() {
	for _, d := range p.placed() {
		dev := int(d.target.Device)
		for _, m := range d.maps {
			if m.ring == nil || m.mem == nil {
				continue
			}
			name := m.name
			m.ring.Poll(func(rec []byte) {
				p.s.deliver(Record{PID: p.PID, Device: dev, Map: name, Data: append([]byte(nil), rec...)})
			})
		}
		if d.printk != nil && d.printk.mem != nil {
			d.printk.ring.Poll(func(rec []byte) {
				pr, err := gpumap.DecodePrintk(rec)
				text := pr.String()
				if err != nil {
					text = fmt.Sprintf("<bad trace_printk record: %v>", err)
				}
				p.s.deliver(Record{PID: p.PID, Device: dev, Text: text})
			})
		}
	}
}

// deliver queues a record for the tool. A tool that stops reading loses
// records here, counted, rather than stalling the rings (whose producers
// would then drop, also counted).
func (s *Session) deliver(r Record) {
	select {
	case s.records <- r:
		s.mu.Lock()
		s.stats.Records++
		s.mu.Unlock()
	case <-time.After(100 * time.Millisecond):
		s.mu.Lock()
		s.stats.RecordsLost++
		s.mu.Unlock()
	}
}

// MapCopy is one map's contents as read from one place it lives.
type MapCopy struct {
	Name   string
	Spec   *ebpf.MapSpec
	PID    int // 0 for maps that live only in the kernel
	Device int
	Kind   gpumap.Kind // Invalid for kernel maps
	Place  gpumap.Placement
	// Data is the map's memory (header included) for GPU maps; nil for
	// kernel maps, which are read through Kernel.
	Data   []byte
	Kernel *ebpf.Map
	// Errors is the map's GPU-side error counter (out-of-range thread ids,
	// full hash, dropped records).
	Errors uint64
}

// ReadMaps copies every map of the session: GPU maps from every process and
// context they were placed in (device memory read through the agent), and
// the kernel maps. Ring buffers are not included (their records arrive on
// Records).
func (s *Session) ReadMaps() ([]MapCopy, error) {
	var out []MapCopy
	var firstErr error
	for _, p := range s.Processes() {
		p.deviceMaps(func(d *device, m *placedMap) {
			data, err := p.readMap(d, m)
			if err != nil {
				if firstErr == nil {
					firstErr = fmt.Errorf("process %d: reading map %s: %w", p.PID, m.name, err)
				}
				return
			}
			mc := MapCopy{Name: m.name, Spec: m.spec, PID: p.PID, Device: int(d.target.Device), Kind: m.place.Kind, Place: m.place, Data: data}
			if h, err := gpumap.ReadHeader(data); err == nil {
				mc.Errors = h.Errors
			}
			out = append(out, mc)
		})
	}
	if s.kern.coll != nil {
		for _, name := range sortedKeys(s.kern.coll.Maps) {
			out = append(out, MapCopy{Name: name, Spec: s.spec.Maps[name], Kernel: s.kern.coll.Maps[name]})
		}
	}
	return out, firstErr
}

// readDevice reads device memory in chunks the protocol allows.
func (p *Process) readDevice(t agentproto.Target, addr, size uint64) ([]byte, error) {
	const chunk = 16 << 20
	out := make([]byte, 0, size)
	for off := uint64(0); off < size; off += chunk {
		n := size - off
		if n > chunk {
			n = chunk
		}
		b, err := p.conn.Read(t, addr+off, uint32(n))
		if err != nil {
			return nil, err
		}
		out = append(out, b...)
	}
	return out, nil
}

// Entries calls fn for every entry of the map copy: array indexes as 4-byte
// keys, hash entries, per-thread arrays as (thread, key) pairs whose value
// is not all zero (thread in the high 32 bits of the 8-byte key).
func (mc MapCopy) Entries(fn func(key, value []byte) bool) error {
	if mc.Kernel != nil {
		var k, v []byte
		it := mc.Kernel.Iterate()
		for it.Next(&k, &v) {
			if !fn(k, v) {
				return nil
			}
		}
		return it.Err()
	}
	switch mc.Kind {
	case gpumap.Array:
		for i := uint32(0); i < mc.Place.MaxEntries; i++ {
			v, err := gpumap.ArrayValue(mc.Data, mc.Place.ValueSize, i, false)
			if err != nil {
				return err
			}
			if !fn(binary.LittleEndian.AppendUint32(nil, i), v) {
				return nil
			}
		}
	case gpumap.Hash:
		return gpumap.HashEntries(mc.Data, mc.Place, fn)
	case gpumap.PerThreadArray:
		slots := gpumap.Slots(mc.Place)
		for t := uint64(0); t < slots; t++ {
			for k := uint32(0); k < mc.Place.MaxEntries; k++ {
				v, err := gpumap.PerThreadValue(mc.Data, mc.Place, uint32(t), k)
				if err != nil {
					return err
				}
				if allZero(v) {
					continue
				}
				key := binary.LittleEndian.AppendUint32(nil, k)
				key = binary.LittleEndian.AppendUint32(key, uint32(t))
				if !fn(key, v) {
					return nil
				}
			}
		}
	}
	return nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// readMap reads a device-resident map: live through the agent, or, once the
// application has gone, the copy taken at its last module unload.
func (p *Process) readMap(d *device, m *placedMap) ([]byte, error) {
	select {
	case <-p.conn.Done():
	default:
		data, err := p.readDevice(d.target, m.devAddr, gpumap.SizeOf(m.place))
		if err == nil {
			return data, nil
		}
		if b := p.finalCopy(d.target, m.name); b != nil {
			return b, nil
		}
		return nil, err
	}
	if b := p.finalCopy(d.target, m.name); b != nil {
		return b, nil
	}
	return nil, fmt.Errorf("the process exited before its maps could be read")
}

func (p *Process) finalCopy(t agentproto.Target, name string) []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.final[t][name]
}

// lastLook runs while the application waits in a module unload or at
// exit: drain the rings, copy every device map and the launch counts, so
// the tool can report them after the process is gone. It can run several
// times (every unload, then exit); a read that fails because the
// application has already torn its contexts down keeps the copy an
// earlier look took.
func (p *Process) lastLook() {
	p.drain()
	type copied struct {
		t    agentproto.Target
		name string
		data []byte
	}
	var got []copied
	p.deviceMaps(func(d *device, m *placedMap) {
		if data, err := p.readDevice(d.target, m.devAddr, gpumap.SizeOf(m.place)); err == nil {
			got = append(got, copied{d.target, m.name, data})
		} else if p.finalCopy(d.target, m.name) == nil {
			p.s.logf("process %d: last read of map %s: %v", p.PID, m.name, err)
		}
	})
	p.refreshLaunches()
	p.mu.Lock()
	if p.final == nil {
		p.final = map[agentproto.Target]map[string][]byte{}
	}
	for _, c := range got {
		if p.final[c.t] == nil {
			p.final[c.t] = map[string][]byte{}
		}
		p.final[c.t][c.name] = c.data
	}
	p.mu.Unlock()
}

// placed returns the contexts the session has placed maps in.
func (p *Process) placed() []*device {
	p.mu.Lock()
	defer p.mu.Unlock()
	devs := make([]*device, 0, len(p.devs))
	for _, d := range p.devs {
		devs = append(devs, d)
	}
	return devs
}

// deviceMaps calls fn for every map of p that lives in device memory and is
// worth reading back: not rings (their records arrive on Records), not
// kernel maps (read through the kernel), not constants (.rodata).
func (p *Process) deviceMaps(fn func(d *device, m *placedMap)) {
	for _, d := range p.placed() {
		for _, name := range sortedKeys(d.maps) {
			m := d.maps[name]
			if m.ring != nil || m.kmap != nil || strings.HasPrefix(name, ".rodata") {
				continue
			}
			fn(d, m)
		}
	}
}
