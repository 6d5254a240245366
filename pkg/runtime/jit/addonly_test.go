package jit

import (
	"maps"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

// lookup is r0 = bpf_map_lookup_elem(&name, &(u32)0), going to "out" when
// it is NULL.
func lookup(name string) asm.Instructions { return lookupTo(name, "out") }

func lookupTo(name, out string) asm.Instructions {
	return asm.Instructions{
		asm.StoreImm(asm.R10, -4, 0, asm.Word),
		asm.LoadMapPtr(asm.R1, 0).WithReference(name),
		asm.Mov.Reg(asm.R2, asm.R10),
		asm.Add.Imm(asm.R2, -4),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, out),
	}
}

// labelled labels a sequence's first instruction.
func labelled(sym string, is asm.Instructions) asm.Instructions {
	is[0] = is[0].WithSymbol(sym)
	return is
}

func seq(parts ...asm.Instructions) asm.Instructions {
	var out asm.Instructions
	for _, p := range parts {
		out = append(out, p...)
	}
	return append(out, asm.Mov.Imm(asm.R0, 0).WithSymbol("out"), asm.Return())
}

// What the analysis lets a map's updates go to a device copy for, and what
// it keeps from that: an add-only claim it gets wrong would lose or
// invent updates of a map the CPU shares.
func TestAddOnlyMaps(t *testing.T) {
	one := asm.Instructions{asm.Mov.Imm(asm.R1, 1)}
	for _, tc := range []struct {
		name string
		prog asm.Instructions
		want map[string]int
	}{
		{"atomic add", seq(lookup("m"), one, asm.Instructions{asm.AddAtomic.Mem(asm.R0, asm.R1, asm.DWord, 0)}), map[string]int{"m": 8}},
		{"32-bit atomic add at an offset", seq(lookup("m"), one, asm.Instructions{asm.AddAtomic.Mem(asm.R0, asm.R1, asm.Word, 4)}), map[string]int{"m": 4}},
		{"looked up, never written", seq(lookup("m")), map[string]int{"m": 0}},
		{"a load of the value", seq(lookup("m"), asm.Instructions{asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord)}), map[string]int{}},
		{"a store to the value", seq(lookup("m"), asm.Instructions{asm.StoreImm(asm.R0, 0, 1, asm.Word)}), map[string]int{}},
		{"a fetching add (the old value is read)", seq(lookup("m"), one, asm.Instructions{asm.FetchAdd.Mem(asm.R0, asm.R1, asm.DWord, 0)}), map[string]int{}},
		{"an atomic or", seq(lookup("m"), one, asm.Instructions{asm.OrAtomic.Mem(asm.R0, asm.R1, asm.DWord, 0)}), map[string]int{}},
		{"adds of two widths", seq(lookup("m"), one, asm.Instructions{
			asm.AddAtomic.Mem(asm.R0, asm.R1, asm.DWord, 0), asm.AddAtomic.Mem(asm.R0, asm.R1, asm.Word, 8)}), map[string]int{}},
		{"spilled and filled, then added to", seq(lookup("m"), asm.Instructions{
			asm.StoreMem(asm.R10, -16, asm.R0, asm.DWord),
			asm.Mov.Imm(asm.R0, 7),
			asm.LoadMem(asm.R3, asm.R10, -16, asm.DWord),
			asm.Mov.Imm(asm.R1, 1),
			asm.AddAtomic.Mem(asm.R3, asm.R1, asm.DWord, 0)}), map[string]int{"m": 8}},
		{"spilled and filled, then loaded through", seq(lookup("m"), asm.Instructions{
			asm.StoreMem(asm.R10, -16, asm.R0, asm.DWord),
			asm.LoadMem(asm.R3, asm.R10, -16, asm.DWord),
			asm.LoadMem(asm.R4, asm.R3, 0, asm.DWord)}), map[string]int{}},
		{"spilled through a stack pointer in another register", seq(lookup("m"), asm.Instructions{
			asm.Mov.Reg(asm.R6, asm.R10),
			asm.Add.Imm(asm.R6, -24),
			asm.StoreMem(asm.R6, 8, asm.R0, asm.DWord), // r10-16
			asm.LoadMem(asm.R3, asm.R10, -16, asm.DWord),
			asm.LoadMem(asm.R4, asm.R3, 0, asm.DWord)}), map[string]int{}},
		{"kept in another map's value", append(lookup("other"), seq(asm.Instructions{
			asm.Mov.Reg(asm.R6, asm.R0)}, lookup("m"), asm.Instructions{
			asm.StoreMem(asm.R6, 0, asm.R0, asm.DWord)})...), map[string]int{}},
		{"the source of bpf_probe_read", seq(lookup("m"), asm.Instructions{
			asm.Mov.Reg(asm.R3, asm.R0), asm.Mov.Reg(asm.R1, asm.R10), asm.Add.Imm(asm.R1, -16), asm.Mov.Imm(asm.R2, 8),
			asm.FnProbeRead.Call()}), map[string]int{}},
		{"a pointer left in r3 over a helper that does not read it", seq(lookup("m"), asm.Instructions{
			asm.Mov.Reg(asm.R6, asm.R0), asm.Mov.Reg(asm.R3, asm.R0), asm.FnKtimeGetNs.Call(),
			asm.Mov.Imm(asm.R1, 1), asm.AddAtomic.Mem(asm.R6, asm.R1, asm.DWord, 0)}), map[string]int{"m": 8}},
		{"updated through bpf_map_update_elem", seq(asm.Instructions{
			asm.StoreImm(asm.R10, -4, 0, asm.Word), asm.StoreImm(asm.R10, -16, 0, asm.Word), asm.StoreImm(asm.R10, -12, 0, asm.Word),
			asm.LoadMapPtr(asm.R1, 0).WithReference("m"),
			asm.Mov.Reg(asm.R2, asm.R10), asm.Add.Imm(asm.R2, -4),
			asm.Mov.Reg(asm.R3, asm.R10), asm.Add.Imm(asm.R3, -16),
			asm.Mov.Imm(asm.R4, 0), asm.FnMapUpdateElem.Call()}), map[string]int{}},
		{"a value's direct address, added to", seq(asm.Instructions{
			asm.LoadMapValue(asm.R2, 0, 8).WithReference("m"), asm.Mov.Imm(asm.R1, 1),
			asm.AddAtomic.Mem(asm.R2, asm.R1, asm.DWord, 0)}), map[string]int{"m": 8}},
		{"a pointer walked in a loop, added to", seq(lookup("m"), asm.Instructions{
			asm.Mov.Imm(asm.R2, 0),
			asm.Mov.Imm(asm.R1, 1).WithSymbol("loop"),
			asm.AddAtomic.Mem(asm.R0, asm.R1, asm.DWord, 0),
			asm.Add.Imm(asm.R0, 8),
			asm.Add.Imm(asm.R2, 1),
			asm.JLT.Imm(asm.R2, 4, "loop")}), map[string]int{"m": 8}},
		{"a stack pointer on one path, the value on the other, stored through", seq(lookup("m"), asm.Instructions{
			asm.Mov.Reg(asm.R3, asm.R10),
			asm.Add.Imm(asm.R3, -32),
			asm.JEq.Imm(asm.R1, 0, "join"),
			asm.Mov.Reg(asm.R3, asm.R0),
			asm.StoreImm(asm.R3, 0, 1, asm.Word).WithSymbol("join")}), map[string]int{}},
		{"handed to a function", append(seq(lookup("m"), asm.Instructions{
			asm.Mov.Reg(asm.R1, asm.R0), asm.Call.Label("f")}),
			asm.Mov.Imm(asm.R0, 0).WithSymbol("f"), asm.Return()), map[string]int{}},
		{"a function's own lookup and add", append(seq(asm.Instructions{asm.Call.Label("f")}),
			append(labelled("f", lookupTo("m", "fout")), asm.Mov.Imm(asm.R1, 1), asm.AddAtomic.Mem(asm.R0, asm.R1, asm.DWord, 0),
				asm.Mov.Imm(asm.R0, 0).WithSymbol("fout"), asm.Return())...), map[string]int{"m": 8}},
		{"named only in code never reached", seq(lookup("m"), asm.Instructions{
			asm.Ja.Label("out"),
			asm.LoadMapValue(asm.R2, 0, 0).WithReference("m"),
			asm.StoreImm(asm.R2, 0, 1, asm.Word)}), map[string]int{}},
		{"returned by a function", append(seq(asm.Instructions{asm.Call.Label("f"), asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord)}),
			append(labelled("f", lookupTo("m", "fout")), asm.Return().WithSymbol("fout"))...), map[string]int{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := AddOnlyMaps(tc.prog)
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got, tc.want) {
				t.Errorf("AddOnlyMaps = %v, want %v", got, tc.want)
			}
		})
	}
}

// The repository's programs, as clang compiled them: the counters
// threadhist adds to and bench_shared's CPU-shared map are add-only;
// launchlate's start table, written with plain stores, is not.
func TestAddOnlyMapsOfObjects(t *testing.T) {
	for _, tc := range []struct {
		obj, prog string
		want      map[string]int
	}{
		{"../../../bpf/bench/bench_shared.bpf.o", "shared_entry", map[string]int{"shared_counts": 8}},
		{"../../../tools/threadhist/threadhist_bpfel.o", "threadhist_exit", map[string]int{"runs": 8, "nsecs": 8, "lost": 8}},
	} {
		spec, err := ebpf.LoadCollectionSpec(tc.obj)
		if err != nil {
			t.Fatal(err)
		}
		p := spec.Programs[tc.prog]
		if p == nil {
			t.Fatalf("%s: no program %s", tc.obj, tc.prog)
		}
		got, err := AddOnlyMaps(p.Instructions)
		if err != nil {
			t.Fatal(err)
		}
		for m, w := range tc.want {
			if gw, ok := got[m]; !ok || gw != w {
				t.Errorf("%s: map %s: add-only %v width %d, want width %d (all: %v)", tc.prog, m, ok, gw, w, got)
			}
		}
	}
	spec, err := ebpf.LoadCollectionSpec("../../../tools/launchlate/launchlate_bpfel.o")
	if err != nil {
		t.Fatal(err)
	}
	for name, p := range spec.Programs {
		got, err := AddOnlyMaps(p.Instructions)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := got["starts"]; ok {
			t.Errorf("launchlate %s: its start table, which it stores to, called add-only: %v", name, got)
		}
	}
}
