package jit

import (
	"errors"
	"maps"
	"slices"
	"testing"

	"github.com/cilium/ebpf/asm"
)

// LoopHeads: the one rule for the compiler's loop budget and the
// verifier's twin: a jump back to an instruction at or before it, by
// offset, by label or gotol, but not to a function's start.
func TestLoopHeads(t *testing.T) {
	gotol := func(off int32) asm.Instruction {
		return asm.Instruction{OpCode: asm.OpCode(asm.Jump32Class).SetJumpOp(asm.Ja), Constant: int64(off)}
	}
	tests := []struct {
		name  string
		insns asm.Instructions
		want  map[int][]int
	}{
		{"a counted loop by offset", asm.Instructions{
			asm.Mov.Imm(asm.R0, 0),               // 0
			asm.Add.Imm(asm.R0, 1),               // 1: head
			off(asm.JLT.Imm(asm.R0, 10, ""), -2), // 2: back to 1
			asm.Return(),                         // 3
		}, map[int][]int{1: {2}}},
		{"by label, and a self loop", asm.Instructions{
			asm.Mov.Imm(asm.R0, 0),
			asm.Add.Imm(asm.R0, 1).WithSymbol("top"), // 1: head by label
			asm.JLT.Imm(asm.R0, 10, "top"),           // 2
			asm.Ja.Label("self").WithSymbol("self"),  // 3: jumps to itself
			asm.Return(),
		}, map[int][]int{1: {2}, 3: {3}}},
		{"gotol back", asm.Instructions{
			asm.Mov.Imm(asm.R0, 0),
			asm.Add.Imm(asm.R0, 1), // 1
			gotol(-2),              // 2: back to 1
			asm.Return(),
		}, map[int][]int{1: {2}}},
		{"forward jumps only", asm.Instructions{
			asm.Mov.Imm(asm.R0, 0),
			off(asm.JEq.Imm(asm.R0, 0, ""), 1),
			asm.Mov.Imm(asm.R0, 1),
			asm.Return(),
		}, map[int][]int{}},
		{"a jump to the main program's start is no loop", asm.Instructions{
			asm.Mov.Imm(asm.R0, 0),              // 0
			off(asm.JEq.Imm(asm.R1, 0, ""), -2), // 1: back to 0
			asm.Return(),
		}, map[int][]int{}},
		{"a loop in a called function", asm.Instructions{
			asm.Call.Label("f"),                    // 0
			asm.Return(),                           // 1
			asm.Mov.Imm(asm.R0, 0).WithSymbol("f"), // 2: start of f
			asm.Add.Imm(asm.R0, 1),                 // 3: head
			off(asm.JLT.Imm(asm.R0, 4, ""), -2),    // 4: back to 3
			off(asm.JEq.Imm(asm.R0, 9, ""), -4),    // 5: back to f's start: none
			asm.Return(),
		}, map[int][]int{3: {4}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := LoopHeads(tc.insns)
			if err != nil {
				t.Fatal(err)
			}
			if !maps.EqualFunc(got, tc.want, slices.Equal) {
				t.Errorf("loop heads %v, want %v", got, tc.want)
			}
		})
	}
}

// A jump that lands nowhere is an error naming the instruction.
func TestLoopHeadsBadJump(t *testing.T) {
	_, err := LoopHeads(asm.Instructions{off(asm.JEq.Imm(asm.R0, 0, ""), -5), asm.Return()})
	var te *targetError
	if !errors.As(err, &te) || te.at != 0 {
		t.Fatalf("error %v: want a targetError at instruction 0", err)
	}
}

// off sets a jump's offset (raw slots after it), as an object file has it.
func off(ins asm.Instruction, o int16) asm.Instruction {
	ins.Offset = o
	return ins
}
