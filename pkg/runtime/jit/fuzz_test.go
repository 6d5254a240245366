package jit

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/cilium/ebpf/asm"

	"github.com/gpubpf/gpubpf/internal/testenv"
	"github.com/gpubpf/gpubpf/pkg/runtime/gpumap"
	"github.com/gpubpf/gpubpf/pkg/runtime/jit/difftest"
)

// fuzzMapRefs names maps for lddw map loads in fuzzed streams, by fd.
var fuzzMapRefs = []string{"arr", "pta", "hash", "ring", "host"}

// decodeFuzz turns raw bytes into instructions the way the kernel would
// read them, attaching map names to map loads.
func decodeFuzz(data []byte) asm.Instructions {
	var insns asm.Instructions
	r := bytes.NewReader(data)
	for r.Len() >= asm.InstructionSize {
		var ins asm.Instruction
		if err := ins.Unmarshal(r, binary.LittleEndian, "linux"); err != nil {
			break
		}
		if ins.IsLoadFromMap() {
			ins = ins.WithReference(fuzzMapRefs[uint32(ins.Constant)%uint32(len(fuzzMapRefs))])
		}
		insns = append(insns, ins)
	}
	return insns
}

func encode(insns asm.Instructions) []byte {
	var b bytes.Buffer
	for _, ins := range insns {
		if ins.OpCode.Class() == asm.StXClass && ins.OpCode.Mode() == asm.AtomicMode {
			ins.Constant = int64(uint32(ins.OpCode.AtomicOp()) >> 8)
		}
		if _, err := ins.Marshal(&b, binary.LittleEndian); err != nil {
			return nil
		}
	}
	return b.Bytes()
}

// FuzzCompile: arbitrary instruction streams give an error or PTX, never a
// panic; accepted PTX assembles (checked for every 64th accepted input when
// ptxas is present, so the fuzzer keeps its speed).
func FuzzCompile(f *testing.F) {
	for seed := int64(0); seed < 20; seed++ {
		if b := encode(difftest.Program(seed)); b != nil {
			f.Add(b)
		}
	}
	for _, insns := range allCases() {
		if b := encode(insns); b != nil {
			f.Add(b)
		}
	}
	ptxas := testenv.Lookup("ptxas")
	accepted := 0
	f.Fuzz(func(t *testing.T, data []byte) {
		insns := decodeFuzz(data)
		if len(insns) == 0 {
			return
		}
		AddOnlyMaps(insns) // any program: an answer or an error, never a panic or a hang
		fn, err := Compile(prog(insns...), testOpts())
		if err != nil {
			return
		}
		accepted++
		if ptxas != "" && accepted%64 == 1 {
			assemble(t, fn)
		}
	})
}

// BenchmarkCompile4096 compiles a 4096-instruction generated program.
func BenchmarkCompile4096(b *testing.B) {
	var insns asm.Instructions
	for seed := int64(0); len(insns) < 4096; seed++ {
		p := difftest.Program(seed)
		// Keep the straight-line part of each program (up to its exit).
		for _, ins := range p {
			if ins.OpCode.JumpOp() == asm.Exit {
				break
			}
			if ins.IsFunctionCall() {
				continue
			}
			insns = append(insns, ins)
		}
	}
	insns = insns[:4095]
	// Branches cut off by the truncation become plain moves.
	raw, pos := 0, make([]int, len(insns))
	for i := range insns {
		pos[i] = raw
		raw += int(insns[i].Width())
	}
	for i, ins := range insns {
		if ins.OpCode.Class().IsJump() && ins.OpCode.JumpOp() != asm.Call && pos[i]+1+int(ins.Offset) >= raw {
			insns[i] = asm.Mov.Imm(asm.R0, 0)
		}
	}
	insns = append(insns, asm.Return())
	opts := Options{Maps: map[string]gpumap.Placement{
		"res":  {Kind: gpumap.Array, Addr: 0x7f0000000000, KeySize: 4, ValueSize: difftest.ResSize, MaxEntries: 1},
		"data": {Kind: gpumap.Array, Addr: 0x7f0000010000, KeySize: 4, ValueSize: 8, MaxEntries: difftest.DataEntries},
		"h":    {Kind: gpumap.Hash, Addr: 0x7f0000020000, KeySize: 8, ValueSize: 8, MaxEntries: difftest.HashMax},
	}, FuncName: "bench"}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := Compile(prog(insns...), opts); err != nil {
			b.Fatal(err)
		}
	}
}
