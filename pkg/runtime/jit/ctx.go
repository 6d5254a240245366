package jit

import (
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
)

// CtxMax is the most bytes of ctx a GPU program may read: CUDA's classic
// limit on a kernel's parameters (4 KiB). The safety verifier's CPU twin
// hands the program a ctx of this many bytes, so the kernel's verifier
// bounds every ctx access to [0, CtxMax); Function.CtxBytes never exceeds it.
const CtxMax = 4096

// ctxVal is what the ctx analysis knows of a register or a stack slot.
type ctxVal struct {
	kind   uint8
	c      uint64 // vConst
	lo, hi int64  // vCtx, vFP: an offset in [lo, hi] (several where paths join)
}

const (
	vOther uint8 = iota // no pointer to ctx or the stack
	vConst              // a known number (to follow ctx + r)
	vCtx                // ctx + offset
	vFP                 // r10 + offset: where a ctx pointer may be spilled
	// vMixed is ctx on one path and a stack pointer on another. Harmless
	// while it is not used: clang reuses a callee-saved register that held
	// ctx for a stack address on one branch, and the register is dead
	// where the branches meet. Used as a pointer (an access through it,
	// stored, handed to a helper) it is not followed: CtxMax.
	vMixed
)

// mayBeCtx reports whether v may be a pointer into ctx.
func mayBeCtx(v ctxVal) bool { return v.kind == vCtx || v.kind == vMixed }

// fpAny is the range of a stack pointer whose offset is not known.
const fpAny = 1 << 30

const ctxSlots = StackSize / 8

// ctxState is what the analysis knows at a point of the program: registers
// and the 8-byte stack slots (where clang spills ctx under register
// pressure).
type ctxState struct {
	r [11]ctxVal
	s [ctxSlots]ctxVal
}

// join merges what two paths know: a value that is ctx on one and a
// stack pointer on the other is vMixed.
func join(a, b ctxVal) ctxVal {
	switch {
	case a == b:
		return a
	case a.kind == b.kind && (a.kind == vCtx || a.kind == vFP):
		return ctxVal{kind: a.kind, lo: min(a.lo, b.lo), hi: max(a.hi, b.hi)}
	case a.kind >= vCtx && b.kind >= vCtx:
		return ctxVal{kind: vMixed}
	case a.kind >= vCtx:
		// On the other path there is no pointer: where there is one, it
		// is a's.
		return a
	case b.kind >= vCtx:
		return b
	}
	return ctxVal{}
}

// ctxPtrArgs has bit r set for each argument register r that a helper's
// GPU code may access memory through or hand on (to r0, a record, another
// lane); the rest are only compared or copied as numbers, so a ctx pointer
// there (bpf_perf_event_output's ctx, r1 left over before a call of a
// helper without arguments) goes nowhere. A helper missing here counts as
// handing on all five.
var ctxPtrArgs = map[int64]uint8{
	hMapLookup: 1 << 2, hMapUpdate: 1<<2 | 1<<3, hMapDelete: 1 << 2,
	hProbeRead: 1<<1 | 1<<3, hProbeReadStr: 1<<1 | 1<<3, hProbeReadUser: 1<<1 | 1<<3,
	hProbeReadKern: 1<<1 | 1<<3, hProbeUserStr: 1<<1 | 1<<3, hProbeKernStr: 1<<1 | 1<<3,
	hTracePrintk: 1 << 1, hPuts: 1 << 1, hPerfOutput: 1 << 4, hRingOutput: 1 << 2,
	hRingReserve: 0, hRingSubmit: 1 << 1, hRingDiscard: 1 << 1,
	hBlockIdx: 0xe, hBlockDim: 0xe, hThreadIdx: 0xe, hGridDim: 0xe, hShfl: 1 << 1,
	hKtimeNS: 0, hGlobaltimer: 0, hPrandom: 0, hSMPProcessor: 0, hPidTgid: 0, hMembar: 0,
	hExit: 0, hSMID: 0, hWarpID: 0, hLaneID: 0, hKernelIndex: 0, hGridID: 0, hActiveMask: 0,
	hSiteTime: 0, hLaunchWord: 0, hThreadID: 0, hEntryTime: 0, hAtomicMax: 1 << 1,
}

// ctxBytes returns the end (offset + size) of the furthest ctx access of
// the main program, which the injector sizes the ctx buffer to. It follows
// ctx + a constant through registers and stack spills on every path (a
// forward data-flow analysis: unlike the stack tracking of compileFunc,
// which may forget a pointer at a label and fall back to generic
// addressing, losing a ctx pointer here would under-size the buffer).
// Where a ctx pointer goes anywhere it is not followed (a variable offset,
// memory other than a stack slot, a helper or subprogram argument) or an
// access ends past CtxMax, the answer is CtxMax: the verifier's twin
// bounds those accesses to it. Subprograms get ctx as an argument and
// count as such.
func (c *compiler) ctxBytes() int {
	sp := c.subs[0]
	// States are kept at jump targets only; a block's instructions are
	// walked with one running state.
	target := make([]bool, sp.end+1)
	for i := sp.start; i < sp.end; i++ {
		if t := c.target[i]; t >= sp.start && t < sp.end && !c.insns[i].IsFunctionCall() {
			target[t] = true
		}
	}
	first := &ctxState{}
	first.r[1] = ctxVal{kind: vCtx}
	first.r[10] = ctxVal{kind: vFP}
	in := map[int]*ctxState{sp.start: first}
	work := []int{sp.start}
	queued := map[int]bool{sp.start: true}
	// merge joins st into the state at target j.
	merge := func(j int, st *ctxState) {
		old := in[j]
		changed := false
		if old == nil {
			s := *st
			in[j], changed = &s, true
		} else {
			for k := range st.r {
				v := join(old.r[k], st.r[k])
				changed = changed || v != old.r[k]
				old.r[k] = v
			}
			for k := range st.s {
				v := join(old.s[k], st.s[k])
				changed = changed || v != old.s[k]
				old.s[k] = v
			}
		}
		if changed && !queued[j] {
			queued[j] = true
			work = append(work, j)
		}
	}
	reach := 0
	// Loops that move a ctx pointer grow its range until it passes
	// CtxMax; the budget only guards against pathological programs.
	budget := 64*(sp.end-sp.start) + 1<<16
	for len(work) > 0 {
		i := work[len(work)-1]
		work = work[:len(work)-1]
		queued[i] = false
		st := *in[i]
		for i < sp.end {
			if budget--; budget < 0 {
				return CtxMax
			}
			end, ok := c.ctxStep(i, &st)
			if !ok {
				return CtxMax
			}
			reach = max(reach, end)
			op := c.insns[i].OpCode
			jump := op.Class().IsJump() && op.JumpOp() != asm.Call
			if jump && op.JumpOp() == asm.Exit {
				break
			}
			if jump {
				if t := c.target[i]; t >= sp.start && t < sp.end {
					merge(t, &st)
				}
				if op.JumpOp() == asm.Ja {
					break
				}
			}
			i++
			if i < sp.end && target[i] {
				merge(i, &st)
				break
			}
		}
	}
	return reach
}

// slotRange returns the stack slots an access of size bytes at r10 +
// [lo, hi] may touch, and whether it is exactly one whole slot.
func slotRange(lo, hi int64, size int) (first, last int, whole bool) {
	first = int(max((lo+StackSize)/8, 0))
	last = int(min((hi+StackSize+int64(size)-1)/8, ctxSlots-1))
	whole = lo == hi && size == 8 && lo%8 == 0 && lo >= -StackSize && lo <= -8
	return first, last, whole
}

// ctxStep applies instruction i to st and returns the end of the ctx bytes
// it accesses (0 if none); false when a ctx pointer leaves the analysis or
// an access ends past CtxMax.
func (c *compiler) ctxStep(i int, st *ctxState) (end int, ok bool) {
	ins := &c.insns[i]
	op := ins.OpCode
	cls := op.Class()
	get := func(r asm.Register) ctxVal {
		if r > asm.R10 {
			return ctxVal{}
		}
		return st.r[r]
	}
	set := func(r asm.Register, v ctxVal) {
		if r <= asm.R9 {
			st.r[r] = v
		}
	}
	anySlot := func(kind uint8) bool {
		for _, v := range st.s {
			if v.kind == kind {
				return true
			}
		}
		return false
	}
	// load returns what a load of size bytes through base+off gives,
	// after counting a ctx access.
	load := func(base asm.Register, size int) (ctxVal, bool) {
		b := get(base)
		off := int64(ins.Offset)
		switch b.kind {
		case vMixed:
			return ctxVal{}, false
		case vCtx:
			e := b.hi + off + int64(size)
			if e > CtxMax {
				return ctxVal{}, false
			}
			end = max(end, int(e))
		case vFP:
			if size != 8 {
				return ctxVal{}, true // part of a pointer is a number
			}
			first, last, whole := slotRange(b.lo+off, b.hi+off, size)
			if whole {
				return st.s[first], true
			}
			v := ctxVal{}
			for k := first; k <= last; k++ {
				v = join(v, st.s[k])
			}
			return v, true
		}
		return ctxVal{}, true
	}
	// store records a store of v (size bytes) through base+off.
	store := func(base asm.Register, size int, v ctxVal) bool {
		b := get(base)
		off := int64(ins.Offset)
		switch b.kind {
		case vMixed:
			return false
		case vCtx:
			e := b.hi + off + int64(size)
			if e > CtxMax || mayBeCtx(v) {
				return false
			}
			end = max(end, int(e))
		case vFP:
			first, last, whole := slotRange(b.lo+off, b.hi+off, size)
			exact := b.lo == b.hi
			switch {
			case whole:
				st.s[first] = v
			case mayBeCtx(v) && (size != 8 || exact):
				return false // part of a ctx pointer, or an unaligned spill
			case v.kind >= vCtx && size == 8:
				// A pointer spilled to one of several slots: each may
				// hold it now.
				for k := first; k <= last; k++ {
					st.s[k] = join(st.s[k], v)
				}
			case exact:
				// A number over part of a slot: no pointer is left there.
				for k := first; k <= last; k++ {
					st.s[k] = ctxVal{}
				}
			}
			// A number stored through a pointer to one of several
			// slots leaves what they may hold.
		default:
			return !mayBeCtx(v) // a ctx pointer into other memory
		}
		return true
	}
	switch {
	case cls.IsALU():
		return 0, c.ctxALU(ins, st)
	case cls == asm.LdClass:
		v := ctxVal{}
		if op.Mode() == asm.ImmMode && ins.Src == 0 {
			v = ctxVal{kind: vConst, c: uint64(ins.Constant)}
		}
		set(ins.Dst, v)
	case cls == asm.LdXClass:
		v, ok := load(ins.Src, sizeBytes(op.Size()))
		if !ok {
			return 0, false
		}
		set(ins.Dst, v)
	case cls == asm.StClass:
		v := ctxVal{}
		if op.Size() == asm.DWord {
			v = ctxVal{kind: vConst, c: uint64(ins.Constant)}
		}
		if !store(ins.Dst, sizeBytes(op.Size()), v) {
			return 0, false
		}
	case cls == asm.StXClass:
		sz := sizeBytes(op.Size())
		if op.Mode() != asm.AtomicMode {
			if !store(ins.Dst, sz, get(ins.Src)) {
				return 0, false
			}
			break
		}
		switch op.AtomicOp() {
		case asm.AtomicOp(0x0001_0000): // load-acquire: Src is the address
			v, ok := load(ins.Src, sz)
			if !ok {
				return 0, false
			}
			set(ins.Dst, v)
			return end, true
		case asm.AtomicOp(0x0001_1000): // store-release
			if !store(ins.Dst, sz, get(ins.Src)) {
				return 0, false
			}
			return end, true
		}
		// A read-modify-write: the value is a number, the old one
		// comes back as one; a pointer on either side is not followed.
		if mayBeCtx(get(ins.Src)) || get(ins.Dst).kind == vFP && (anySlot(vCtx) || anySlot(vFP) || anySlot(vMixed)) {
			return 0, false
		}
		if !store(ins.Dst, sz, ctxVal{}) {
			return 0, false
		}
		_, w := regUse(ins)
		for r := asm.R0; r <= asm.R9; r++ {
			if w&(1<<r) != 0 {
				st.r[r] = ctxVal{}
			}
		}
	case cls.IsJump() && op.JumpOp() == asm.Call:
		args := uint8(0x3e)
		sub := ins.IsFunctionCall()
		if ins.IsBuiltinCall() {
			if m, ok := ctxPtrArgs[ins.Constant]; ok {
				args = m
			}
		} else if sub {
			// A subprogram may do anything with its arguments; with
			// BTF, the registers past its parameters are not passed.
			if t := c.target[i]; t >= 0 {
				if fn := btf.FuncMetadata(&c.insns[t]); fn != nil {
					if p, ok := fn.Type.(*btf.FuncProto); ok && len(p.Params) <= 5 {
						args = uint8(1<<(len(p.Params)+1)-2) & 0x3e
					}
				}
			}
		}
		for r := asm.R1; r <= asm.R5; r++ {
			if args&(1<<r) == 0 {
				continue
			}
			switch st.r[r].kind {
			case vCtx, vMixed:
				return 0, false
			case vFP:
				// A subprogram can read a spilled ctx pointer through
				// a pointer to the caller's stack. (What a helper
				// writes there is a number; a slot still thought to
				// hold a pointer only makes the answer larger.)
				if sub && (anySlot(vCtx) || anySlot(vFP) || anySlot(vMixed)) {
					return 0, false
				}
			}
		}
		for r := asm.R0; r <= asm.R5; r++ {
			st.r[r] = ctxVal{}
		}
	}
	return end, true
}

// ctxALU applies an ALU instruction; false when a ctx pointer leaves the
// analysis.
func (c *compiler) ctxALU(ins *asm.Instruction, st *ctxState) bool {
	op := ins.OpCode
	if ins.Dst > asm.R9 {
		return true // r10 is read-only: compileFunc refuses the program
	}
	a := op.ALUOp()
	src := ctxVal{kind: vConst, c: uint64(ins.Constant)}
	if op.Source() == asm.RegSource && a != asm.Swap && a != asm.Neg {
		src = ctxVal{}
		if ins.Src <= asm.R10 {
			src = st.r[ins.Src]
		}
	}
	dst := st.r[ins.Dst]
	if op.Class() != asm.ALU64Class {
		// 32-bit arithmetic on a pointer: no address is left.
		if mayBeCtx(src) || mayBeCtx(dst) && a != asm.Mov {
			return false
		}
		st.r[ins.Dst] = ctxVal{}
		if a == asm.Mov && src.kind == vConst {
			st.r[ins.Dst] = ctxVal{kind: vConst, c: uint64(uint32(src.c))}
		}
		return true
	}
	ptr := func(v ctxVal) bool { return v.kind == vCtx || v.kind == vFP }
	var v ctxVal
	switch {
	case a == asm.Mov:
		v = src
	case a == asm.Add && ptr(dst) && src.kind == vConst:
		v = shift(dst, int64(src.c))
	case a == asm.Add && dst.kind == vConst && ptr(src):
		v = shift(src, int64(dst.c))
	case a == asm.Sub && ptr(dst) && src.kind == vConst:
		v = shift(dst, -int64(src.c))
	case a == asm.Sub && ptr(dst) && dst.kind == src.kind:
		v = ctxVal{} // a distance, not a pointer
	case dst.kind == vCtx || src.kind == vCtx:
		return false // a variable offset, or bits of a ctx pointer
	case dst.kind == vMixed || src.kind == vMixed:
		v = ctxVal{kind: vMixed} // still not to be used as a pointer
	case dst.kind == vFP || src.kind == vFP:
		v = ctxVal{kind: vFP, lo: -fpAny, hi: fpAny}
	case dst.kind == vConst && src.kind == vConst:
		v = fold(a, dst.c, src.c)
	}
	switch {
	case v.kind == vCtx && (v.lo < -CtxMax || v.hi > CtxMax):
		return false
	case v.kind == vFP && (v.lo < -fpAny || v.hi > fpAny):
		v = ctxVal{kind: vFP, lo: -fpAny, hi: fpAny}
	}
	st.r[ins.Dst] = v
	return true
}

// fold computes the ALU64 operations that make offsets from constants.
func fold(a asm.ALUOp, x, y uint64) ctxVal {
	switch a {
	case asm.Add:
		return ctxVal{kind: vConst, c: x + y}
	case asm.Sub:
		return ctxVal{kind: vConst, c: x - y}
	case asm.Mul:
		return ctxVal{kind: vConst, c: x * y}
	case asm.LSh:
		return ctxVal{kind: vConst, c: x << (y & 63)}
	case asm.And:
		return ctxVal{kind: vConst, c: x & y}
	case asm.Or:
		return ctxVal{kind: vConst, c: x | y}
	}
	return ctxVal{}
}

// shift moves a pointer's range by d. A ctx pointer moved by more than
// CtxMax is out of bounds (and the sums cannot overflow).
func shift(v ctxVal, d int64) ctxVal {
	if d < -fpAny || d > fpAny {
		return ctxVal{kind: v.kind, lo: -2 * fpAny, hi: 2 * fpAny}
	}
	v.lo += d
	v.hi += d
	return v
}
