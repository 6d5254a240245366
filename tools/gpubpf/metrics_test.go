package main

import (
	"encoding/binary"
	"os"
	"reflect"
	"strconv"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"

	"github.com/gpubpf/gpubpf/pkg/promexport"
	"github.com/gpubpf/gpubpf/pkg/runtime"
	"github.com/gpubpf/gpubpf/pkg/runtime/gpumap"
)

var (
	u32 = &btf.Int{Name: "u32", Size: 4}
	u64 = &btf.Int{Name: "u64", Size: 8}
	s32 = &btf.Int{Name: "s32", Size: 4, Encoding: btf.Signed}
	// struct stat { u64 runs; s32 delta; u32 pad; struct { u64 ns; } t; char tag[8]; }
	stat = &btf.Struct{Name: "stat", Size: 32, Members: []btf.Member{
		{Name: "runs", Type: u64},
		{Name: "delta", Type: s32, Offset: btf.Bits(64)},
		{Name: "pad", Type: u32, Offset: btf.Bits(96), BitfieldSize: 3},
		{Name: "t", Type: &btf.Struct{Size: 8, Members: []btf.Member{{Name: "ns", Type: u64}}}, Offset: btf.Bits(128)},
		{Name: "tag", Type: &btf.Array{Type: &btf.Int{Name: "char", Size: 1}, Nelems: 8}, Offset: btf.Bits(192)},
	}}
)

func statValue(runs uint64, delta int32, ns uint64) []byte {
	v := make([]byte, 32)
	binary.LittleEndian.PutUint64(v, runs)
	binary.LittleEndian.PutUint32(v[8:], uint32(delta))
	binary.LittleEndian.PutUint64(v[16:], ns)
	copy(v[24:], "abcdefgh")
	return v
}

// A map value's integers: the value itself, or a struct's integer members
// by name (nested ones dotted), signed ones signed; bitfields, arrays and
// the rest left out.
func TestNumbers(t *testing.T) {
	tests := []struct {
		name string
		t    btf.Type
		v    []byte
		want []field
	}{
		{"u64", u64, binary.LittleEndian.AppendUint64(nil, 1<<40), []field{{"", 1 << 40}}},
		{"s32", s32, binary.LittleEndian.AppendUint32(nil, uint32(0xfffffffe)), []field{{"", -2}}},
		{"struct", stat, statValue(5, -3, 900), []field{{"runs", 5}, {"delta", -3}, {"t.ns", 900}}},
		{"no BTF, 8 bytes", nil, binary.LittleEndian.AppendUint64(nil, 7), []field{{"", 7}}},
		{"no BTF, 16 bytes", nil, make([]byte, 16), nil},
		{"short value", u64, []byte{1, 2}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := numbers(tc.t, tc.v); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("numbers = %v, want %v", got, tc.want)
			}
		})
	}
}

// --prometheus on gpubpf run: each map's numbers per process, device, key
// and field, as the map printout has them; a series whose entry is gone
// (here: the whole map) goes at the next update; the account comes too.
func TestRunMetrics(t *testing.T) {
	pid := os.Getpid()
	data := make([]byte, gpumap.HeaderSize+2*32)
	copy(data[gpumap.HeaderSize:], statValue(5, -3, 900))
	copy(data[gpumap.HeaderSize+32:], statValue(6, 0, 1000))
	stats := runtime.MapCopy{Name: "stats", PID: pid, Device: 1, Kind: gpumap.Array,
		Place: gpumap.Placement{Kind: gpumap.Array, ValueSize: 32, MaxEntries: 2}, Data: data,
		Spec: &ebpf.MapSpec{Name: "stats", Type: ebpf.Array, KeySize: 4, ValueSize: 32, MaxEntries: 2, Key: u32, Value: stat}}
	e := promexport.New("run", 0)
	m := newRunMetrics(e)
	m.update([]runtime.MapCopy{stats}, runtime.Stats{Launches: 4, KernelsMatched: map[string]bool{"k": true}})
	got, err := e.Values()
	if err != nil {
		t.Fatal(err)
	}
	p := strconv.Itoa(pid)
	// labels in name order: device, field, key, map, pid
	for k, want := range map[string]float64{
		"gpubpf_run_map_value|1|runs|0|stats|" + p:  5,
		"gpubpf_run_map_value|1|delta|0|stats|" + p: -3,
		"gpubpf_run_map_value|1|t.ns|1|stats|" + p:  1000,
		"gpubpf_run_account|instrumented launches":  4,
		"gpubpf_run_account|kernels instrumented":   1,
	} {
		if got[k] != want {
			t.Errorf("%s = %v, want %v (all: %v)", k, got[k], want, got)
		}
	}
	m.update(nil, runtime.Stats{})
	got, _ = e.Values()
	for k := range got {
		if len(k) > len("gpubpf_run_map_value") && k[:len("gpubpf_run_map_value")] == "gpubpf_run_map_value" {
			t.Errorf("%s still there after its map went", k)
		}
	}
}
