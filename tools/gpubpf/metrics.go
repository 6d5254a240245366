package main

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/cilium/ebpf/btf"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpubpf/gpubpf/pkg/btffmt"
	"github.com/gpubpf/gpubpf/pkg/promexport"
	"github.com/gpubpf/gpubpf/pkg/runtime"
	"github.com/gpubpf/gpubpf/pkg/runtime/gpumap"
	"github.com/gpubpf/gpubpf/pkg/toolkit"
)

// runMetrics gives Prometheus and OpenTelemetry (--prometheus, --otlp)
// what gpubpf run prints: the integer numbers of the object's maps as last
// read, per map, process, device, key and field, and the run's account.
type runMetrics struct {
	e      *promexport.Exporter
	mu     sync.Mutex
	values *prometheus.GaugeVec
	last   map[string][]string // label sets set by the last update
}

func newRunMetrics(e *promexport.Exporter) *runMetrics {
	return &runMetrics{e: e, values: e.Gauge("map_value",
		"The integer numbers of the object's maps as gpubpf run last read them: per map, process, device, key and "+
			"field (a struct member's name; empty for a map whose value is one integer).",
		"pid", "map", "device", "key", "field")}
}

// update sets every map's numbers from copies (a series whose entry went,
// a hash key deleted, goes too) and the account from st.
func (m *runMetrics) update(copies []runtime.MapCopy, st runtime.Stats) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := map[string][]string{}
	for _, mc := range copies {
		var kt, vt btf.Type
		if mc.Spec != nil {
			kt, vt = mc.Spec.Key, mc.Spec.Value
		}
		pid, dev := "", ""
		if mc.PID != 0 {
			pid, dev = m.e.Process(mc.PID), strconv.Itoa(mc.Device)
			if mc.Ctx != 0 {
				dev += fmt.Sprintf(" ctx %#x", mc.Ctx)
			}
		}
		mc.Entries(func(k, v []byte) bool {
			key := btffmt.Format(kt, k)
			if mc.Kind == gpumap.PerThreadArray && len(k) == 8 {
				key = fmt.Sprintf("thread %d key %s", binary.LittleEndian.Uint32(k[4:]), btffmt.Format(kt, k[:4]))
			}
			for _, f := range numbers(vt, v) {
				lv := m.e.Labels("map_value", pid, mc.Name, dev, key, f.name)
				m.values.WithLabelValues(lv...).Set(f.v)
				now[strings.Join(lv, "\x00")] = lv
			}
			return true
		})
	}
	for k, lv := range m.last {
		if _, ok := now[k]; !ok {
			m.values.DeleteLabelValues(lv...)
		}
	}
	m.last = now

	var a toolkit.Account
	toolkit.KernelAccount(&a, st)
	if st.RecordsProduced > 0 {
		a.Add(st.RecordsProduced, "records produced on the GPU", "")
		a.Add(st.Records+st.PrintkLines, "records delivered", "")
		a.Add(st.RingDrops, "records dropped on the GPU", "")
		a.Add(st.RecordsDiscard+st.RecordsLost, "records discarded or lost by the tool", "")
	}
	a.Export(m.e)
}

// field is one integer of a map value: a struct member's, or the value's.
type field struct {
	name string
	v    float64
}

// numbers are the integers of a map value of type t: the value itself
// where it is an integer (or, without BTF, 4 or 8 bytes), a struct's
// integer members by name (nested structs as outer.inner), in order;
// nothing else (arrays, pointers, floats: none are counters).
func numbers(t btf.Type, v []byte) []field {
	if t == nil {
		switch len(v) {
		case 4:
			return []field{{"", float64(binary.LittleEndian.Uint32(v))}}
		case 8:
			return []field{{"", float64(binary.LittleEndian.Uint64(v))}}
		}
		return nil
	}
	var out []field
	var walk func(t btf.Type, v []byte, name string)
	walk = func(t btf.Type, v []byte, name string) {
		switch t := btf.UnderlyingType(t).(type) {
		case *btf.Int:
			if n, ok := integer(v, int(t.Size), t.Encoding == btf.Signed); ok {
				out = append(out, field{name, n})
			}
		case *btf.Enum:
			if n, ok := integer(v, int(t.Size), t.Signed); ok {
				out = append(out, field{name, n})
			}
		case *btf.Struct:
			for _, mb := range t.Members {
				off := int(mb.Offset.Bytes())
				if mb.BitfieldSize != 0 || off >= len(v) {
					continue
				}
				sub := mb.Name
				if name != "" {
					sub = name + "." + mb.Name
				}
				walk(mb.Type, v[off:], sub)
			}
		}
	}
	walk(t, v, "")
	return out
}

// integer reads a little-endian integer of size bytes from v.
func integer(v []byte, size int, signed bool) (float64, bool) {
	if size > len(v) {
		return 0, false
	}
	switch size {
	case 1:
		if signed {
			return float64(int8(v[0])), true
		}
		return float64(v[0]), true
	case 2:
		u := binary.LittleEndian.Uint16(v)
		if signed {
			return float64(int16(u)), true
		}
		return float64(u), true
	case 4:
		u := binary.LittleEndian.Uint32(v)
		if signed {
			return float64(int32(u)), true
		}
		return float64(u), true
	case 8:
		u := binary.LittleEndian.Uint64(v)
		if signed {
			return float64(int64(u)), true
		}
		return float64(u), true
	}
	return 0, false
}
