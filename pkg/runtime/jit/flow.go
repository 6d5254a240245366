package jit

import (
	"fmt"

	"github.com/cilium/ebpf/asm"
)

// flow is a program's control flow as the compiler and the verifier's CPU
// twin both see it: where each jump and call goes, and where functions
// begin.
type flow struct {
	rawOff   []int       // raw (8-byte slot) offset of each instruction, and of the end
	rawToIdx map[int]int // raw offset -> instruction index (the end included)
	target   []int       // jump or call target index per instruction, -1 none
	starts   []int       // function starts: 0 and every bpf-to-bpf call's target, in order found
}

// targetError is a jump or call resolveFlow could not resolve, at
// instruction at.
type targetError struct {
	at  int
	err error
}

func (e *targetError) Error() string { return fmt.Sprintf("instruction %d: %v", e.at, e.err) }
func (e *targetError) Unwrap() error { return e.err }

// resolveFlow resolves every jump and bpf-to-bpf call of insns: by raw
// offset (an object file's program), by label (a program built with
// references), gotol's 32-bit offset included.
func resolveFlow(insns asm.Instructions) (*flow, error) {
	n := len(insns)
	fl := &flow{rawOff: make([]int, n+1), rawToIdx: make(map[int]int, n+1), target: make([]int, n), starts: []int{0}}
	off := 0
	syms := map[string]int{}
	for i := range insns {
		fl.rawOff[i] = off
		fl.rawToIdx[off] = i
		if s := insns[i].Symbol(); s != "" {
			syms[s] = i
		}
		off += int(insns[i].Width())
	}
	fl.rawOff[n] = off
	fl.rawToIdx[off] = n
	isStart := map[int]bool{0: true}
	fail := func(i int, err error) (*flow, error) { return nil, &targetError{i, err} }
	for i := range insns {
		fl.target[i] = -1
		ins := &insns[i]
		op := ins.OpCode
		if !op.Class().IsJump() {
			continue
		}
		jop := op.JumpOp()
		switch {
		case jop == asm.Exit:
			continue
		case jop == asm.Call:
			if ins.Src != asm.PseudoCall {
				continue
			}
			t := -1
			if ins.Constant == -1 && ins.Reference() != "" {
				ti, ok := syms[ins.Reference()]
				if !ok {
					return fail(i, fmt.Errorf("call of function %q that is not in the program", ins.Reference()))
				}
				t = ti
			} else {
				ti, ok := fl.rawToIdx[fl.rawOff[i]+1+int(ins.Constant)]
				if !ok || ti >= n {
					return fail(i, fmt.Errorf("call target %+d lies outside the program", ins.Constant))
				}
				t = ti
			}
			if t == 0 {
				return fail(i, unsupported("recursive call of the main program"))
			}
			fl.target[i] = t
			if !isStart[t] {
				isStart[t] = true
				fl.starts = append(fl.starts, t)
			}
		default:
			rel, ref := int(ins.Offset), ins.Offset == -1
			if jop == asm.Ja && op.Class() == asm.Jump32Class {
				rel, ref = int(ins.Constant), ins.Constant == -1 // gotol
			}
			if ref && ins.Reference() != "" {
				ti, ok := syms[ins.Reference()]
				if !ok {
					return fail(i, fmt.Errorf("jump to unknown label %q", ins.Reference()))
				}
				fl.target[i] = ti
				continue
			}
			ti, ok := fl.rawToIdx[fl.rawOff[i]+1+rel]
			if !ok || ti >= n {
				return fail(i, fmt.Errorf("jump offset %+d lands outside the program or inside a 64-bit immediate", rel))
			}
			fl.target[i] = ti
		}
	}
	return fl, nil
}

// loopHeads are the loops among insns [lo, hi): each instruction a jump
// goes back to (itself or one before it) that does not begin a function,
// with the jumps that go back to it.
func (fl *flow) loopHeads(insns asm.Instructions, lo, hi int) map[int][]int {
	starts := map[int]bool{}
	for _, s := range fl.starts {
		starts[s] = true
	}
	heads := map[int][]int{}
	for i := lo; i < hi; i++ {
		ins := &insns[i]
		if jop := ins.OpCode.JumpOp(); !ins.OpCode.Class().IsJump() || jop == asm.Call || jop == asm.Exit {
			continue
		}
		if t := fl.target[i]; t >= lo && t <= i && !starts[t] {
			heads[t] = append(heads[t], i)
		}
	}
	return heads
}

// LoopHeads finds the loops of insns: each instruction a jump goes back to
// (itself or one before it) that does not begin a function, with the jumps
// that go back to it. The compiler puts a program's loop budget there
// (Options.LoopBudget), the verifier's CPU twin its may_goto: one rule for
// both, so what the twin proves is what the GPU runs.
func LoopHeads(insns asm.Instructions) (map[int][]int, error) {
	fl, err := resolveFlow(insns)
	if err != nil {
		return nil, err
	}
	return fl.loopHeads(insns, 0, len(insns)), nil
}
