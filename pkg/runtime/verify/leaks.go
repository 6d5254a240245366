package verify

import (
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/gpubpf/gpubpf/pkg/runtime/jit"
)

// The kernel refuses pointer leaks (a pointer stored into a map, or handed
// to a helper that copies it out) only for unprivileged programs, and an
// unprivileged load would also refuse much that a GPU runs safely (any
// variable stack offset, for one). So this pass does that one check: a
// forward data flow over the program that knows which registers and stack
// slots hold pointers (to maps, map values, ring records, the stack or
// ctx) and refuses a store of one anywhere but the program's own stack,
// and a map update or ring output whose data holds a spilled pointer.
// Numbers read from memory (device addresses from the kernel's arguments)
// are data, not leaks. Subprograms are checked with unknown arguments:
// a pointer they store through an argument is not followed.

type kind uint8

const (
	scalar kind = iota
	pointer
	stackPtr // r10 + off, off known
)

type regState struct {
	k     kind
	off   int    // stackPtr: offset from r10
	known bool   // scalar: value is the constant val
	val   int64  //
	m     string // pointer: the map a ld_imm64 named
}

const slots = jitStack / 8

// jitStack is the per-frame stack the GPU gives a program (jit.StackSize).
const jitStack = 512

type state struct {
	r     [11]regState
	stack [slots]bool // 8-byte slot holds a spilled pointer
	live  bool
}

func (s *state) join(o *state) bool {
	if !s.live {
		*s = *o
		return true
	}
	changed := false
	for i := range s.r {
		a, b := &s.r[i], o.r[i]
		n := *a
		switch {
		case a.k == b.k && a.k == stackPtr && a.off == b.off:
		case a.k == b.k && a.k == scalar:
			if !(a.known && b.known && a.val == b.val) {
				n.known = false
			}
		case a.k == b.k && a.k == pointer:
			if a.m != b.m {
				n.m = ""
			}
		default:
			// Differing kinds (or stack offsets): a pointer of unknown
			// place, so storing it anywhere but the stack is refused.
			n = regState{k: pointer}
		}
		if n != *a {
			*a, changed = n, true
		}
	}
	for i := range s.stack {
		if o.stack[i] && !s.stack[i] {
			s.stack[i], changed = true, true
		}
	}
	return changed
}

// leak returns an *Error for the first pointer leak in p, or nil.
func leak(spec *ebpf.CollectionSpec, p *ebpf.ProgramSpec) *Error {
	insns := p.Instructions
	if len(insns) == 0 {
		return nil
	}
	at, raw := offsets(insns)
	states := make([]state, len(insns))
	var entry state
	entry.live = true
	entry.r[asm.R1] = regState{k: pointer} // ctx
	entry.r[asm.R10] = regState{k: stackPtr}
	starts := []int{0}
	for i, ins := range insns {
		if ins.IsFunctionCall() {
			if t, ok := at[raw[i]+1+int(ins.Constant)]; ok {
				starts = append(starts, t)
			}
		}
	}
	var work []int
	for _, s := range starts {
		st := entry
		if s != 0 {
			// A subprogram: its arguments are of unknown kind, but not
			// pointers into its own frame.
			for r := asm.R1; r <= asm.R5; r++ {
				st.r[r] = regState{}
			}
		}
		if states[s].join(&st) {
			work = append(work, s)
		}
	}
	for len(work) > 0 {
		i := work[len(work)-1]
		work = work[:len(work)-1]
		st := states[i]
		ins := insns[i]
		why := step(&st, ins, spec)
		if why != "" {
			return &Error{Program: p.Name, Section: p.SectionName, Insn: i, Source: jit.SourceLine(insns, i),
				Reason: why, Explain: "it copies a pointer (to a map, a map value, a ring record, its stack or ctx) where the host or other threads can read it; store the data it points to, not its address"}
		}
		var next []int
		op := ins.OpCode
		switch {
		case op.JumpOp() == asm.Exit:
		case isJump(ins):
			if t, ok := at[raw[i]+1+jumpOffset(ins)]; ok {
				next = append(next, t)
			}
			if op.JumpOp() != asm.Ja {
				next = append(next, i+1)
			}
		default:
			next = append(next, i+1)
		}
		for _, n := range next {
			if n < len(insns) && states[n].join(&st) {
				work = append(work, n)
			}
		}
	}
	return nil
}

// step applies ins to st and says why ins leaks a pointer ("" if not).
func step(st *state, ins asm.Instruction, spec *ebpf.CollectionSpec) string {
	op := ins.OpCode
	src, dst := st.r[ins.Src%11], &st.r[ins.Dst%11]
	switch cls := op.Class(); {
	case op.IsDWordLoad():
		switch ins.Src {
		case asm.PseudoMapFD, asm.PseudoMapValue:
			*dst = regState{k: pointer, m: ins.Reference()}
		default:
			*dst = regState{known: true, val: ins.Constant}
		}
	case cls == asm.ALU64Class || cls == asm.ALUClass:
		alu := op.ALUOp()
		imm := op.Source() == asm.ImmSource
		if cls == asm.ALUClass {
			*dst = regState{}
			return ""
		}
		switch {
		case alu == asm.Mov && imm:
			*dst = regState{known: true, val: ins.Constant}
		case alu == asm.Mov:
			*dst = src
		case (alu == asm.Add || alu == asm.Sub) && dst.k == stackPtr && imm:
			d := int(ins.Constant)
			if alu == asm.Sub {
				d = -d
			}
			dst.off += d
		case alu == asm.Add || alu == asm.Sub:
			if dst.k != scalar || (!imm && src.k != scalar) {
				*dst = regState{k: pointer}
			} else {
				*dst = regState{}
			}
		default:
			*dst = regState{}
		}
	case cls == asm.LdXClass:
		base := src
		v := regState{}
		if base.k == stackPtr && op.Size() == asm.DWord {
			if s, ok := slot(base.off + int(ins.Offset)); ok && st.stack[s] {
				v = regState{k: pointer}
			}
		}
		*dst = v
	case cls == asm.StClass:
		if dst.k == stackPtr {
			if s, ok := slot(dst.off + int(ins.Offset)); ok {
				st.stack[s] = false
			}
		}
	case cls == asm.StXClass:
		isPtr := src.k != scalar
		if op.Mode() == asm.AtomicMode {
			if isPtr {
				return fmt.Sprintf("atomic operation stores pointer r%d", ins.Src)
			}
			if ins.Constant&0x1 != 0 || ins.Constant == 0xe1 || ins.Constant == 0xf1 { // fetch, xchg, cmpxchg
				st.r[asm.R0] = regState{}
				if ins.Constant != 0xf1 {
					st.r[ins.Src%11] = regState{}
				}
			}
			return ""
		}
		if dst.k == stackPtr {
			s, ok := slot(dst.off + int(ins.Offset))
			if !ok {
				return ""
			}
			st.stack[s] = isPtr && op.Size() == asm.DWord
			return ""
		}
		if isPtr {
			return fmt.Sprintf("stores pointer r%d outside the stack", ins.Src)
		}
	case cls.IsJump() && op.JumpOp() == asm.Call:
		if why := callLeaks(st, ins, spec); why != "" {
			return why
		}
		ret := regState{}
		if ins.IsBuiltinCall() {
			switch asm.BuiltinFunc(ins.Constant) {
			case asm.FnMapLookupElem, asm.FnRingbufReserve:
				ret = regState{k: pointer}
			}
		}
		for r := asm.R1; r <= asm.R5; r++ {
			st.r[r] = regState{}
		}
		st.r[asm.R0] = ret
	}
	return ""
}

// callLeaks checks the data a helper copies out for spilled pointers.
func callLeaks(st *state, ins asm.Instruction, spec *ebpf.CollectionSpec) string {
	if !ins.IsBuiltinCall() {
		return ""
	}
	var data, size asm.Register
	switch asm.BuiltinFunc(ins.Constant) {
	case asm.FnMapUpdateElem:
		data = asm.R3
	case asm.FnRingbufOutput:
		data, size = asm.R2, asm.R3
	case asm.FnPerfEventOutput:
		data, size = asm.R4, asm.R5
	default:
		return ""
	}
	d := st.r[data]
	if d.k != stackPtr {
		return ""
	}
	n := 8 // size unknown: the first slot
	if size != 0 && st.r[size].known {
		n = int(st.r[size].val)
	} else if m := spec.Maps[st.r[asm.R1].m]; size == 0 && m != nil {
		n = int(m.ValueSize)
	}
	for o := d.off; o < d.off+n && o < 0; o += 8 {
		// Slots the data overlaps, aligned down.
		if s, ok := slot(o &^ 7); ok && st.stack[s] {
			return fmt.Sprintf("data passed to helper %v holds a pointer (stack offset %d)", asm.BuiltinFunc(ins.Constant), o&^7)
		}
	}
	return ""
}

// slot is the 8-byte stack slot of r10+off.
func slot(off int) (int, bool) {
	if off < -jitStack || off >= 0 {
		return 0, false
	}
	return (off + jitStack) / 8, true
}

// offsets returns each instruction's raw slot offset (ld_imm64 takes two)
// and the instruction at each offset, to follow jumps.
func offsets(insns asm.Instructions) (at map[int]int, raw []int) {
	at = make(map[int]int, len(insns)+1)
	raw = make([]int, len(insns))
	o := 0
	for i, ins := range insns {
		at[o], raw[i] = i, o
		o += int(ins.Size() / asm.InstructionSize)
	}
	at[o] = len(insns)
	return at, raw
}
