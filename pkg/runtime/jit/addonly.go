package jit

import (
	"fmt"
	"maps"

	"github.com/cilium/ebpf/asm"
)

// AddOnlyMaps finds the maps a program only adds to: every pointer into a
// map's values that the program makes (bpf_map_lookup_elem, or a direct
// value address) is used as the target of atomic adds whose old value it
// does not fetch, all of one width, and for nothing else: no load, no
// store, no other atomic, not passed to a helper or a function, not kept
// anywhere but the program's own stack. It returns each such map's add
// width in bytes (4 or 8; 0 for a map the program looks up but never
// writes).
//
// Such a map's updates commute and nothing on the GPU reads them: they can
// go to a copy in device memory, started at zero, whose growth the runtime
// adds to the real map from time to time (a CPU-shared map, type 1504,
// whose every update otherwise crosses the host link: x919 at 1M threads,
// issue 47). A map this cannot prove add-only is left out, so the answer
// errs only one way.
//
// The analysis follows each register and 8-byte stack slot through the
// control flow (to a fixed point over loops): which maps' values or
// handles it may hold, and whether it is the stack pointer plus a known
// offset. Each function is analysed from its own entry; a value passed to
// or returned from a function, or a stack pointer passed with map pointers
// in the stack, counts as a use.
func AddOnlyMaps(insns asm.Instructions) (map[string]int, error) {
	fl, err := resolveFlow(insns)
	if err != nil {
		return nil, err
	}
	a := &addOnly{insns: insns, fl: fl, idx: map[string]int{}, width: map[int]int{}}
	for i := range insns {
		if insns[i].Dst > asm.R10 || insns[i].Src > asm.R10 && !insns[i].OpCode.Class().IsJump() && !insns[i].IsLoadFromMap() {
			return nil, fmt.Errorf("instruction %d: register out of range", i)
		}
		if insns[i].IsLoadFromMap() {
			if name := insns[i].Reference(); name != "" {
				if _, ok := a.idx[name]; !ok {
					a.idx[name] = len(a.names)
					a.names = append(a.names, name)
				}
			}
		}
	}
	in := a.run()
	// Code the analysis never reached (a callback passed as a value, dead
	// code) says nothing of how it uses a map it names: not claimed.
	for i := range insns {
		if in[i] == nil && insns[i].IsLoadFromMap() {
			a.fail |= a.bit(insns[i].Reference())
		}
	}
	out := map[string]int{}
	for i, name := range a.names {
		if i >= 64 || a.fail&(1<<i) != 0 {
			continue // more maps than a mask holds: not tracked, not claimed
		}
		switch a.width[i] {
		case 0:
			out[name] = 0
		case 4, 8:
			out[name] = a.width[i]
		}
	}
	return out, nil
}

// aval is what a register or stack slot may hold.
type aval struct {
	ptr uint64 // pointers into these maps' values
	hnd uint64 // these maps themselves (ld_imm64 of a map)
	fp  uint8  // 0: not the stack; fpAt: r10+off; fpSome: the stack, offset unknown
	off int
}

const (
	fpAt   = 1
	fpSome = 2
)

func (v aval) bits() uint64 { return v.ptr | v.hnd }

func joinAval(a, b aval) aval {
	out := aval{ptr: a.ptr | b.ptr, hnd: a.hnd | b.hnd}
	switch {
	case a.fp == 0 && b.fp == 0:
	case a.fp == fpAt && b.fp == fpAt && a.off == b.off:
		out.fp, out.off = fpAt, a.off
	default:
		out.fp = fpSome
	}
	return out
}

// astate is the machine as the analysis sees it before one instruction.
type astate struct {
	regs  [11]aval
	stack map[int]aval // by 8-byte slot: offset from r10 / 8, rounded down
	any   aval         // stored through a stack pointer of unknown offset: may be in any slot
}

func (s *astate) clone() *astate {
	c := *s
	c.stack = maps.Clone(s.stack)
	return &c
}

// merge joins o into s and says whether s changed.
func (s *astate) merge(o *astate) bool {
	changed := false
	set := func(dst *aval, v aval) {
		if *dst != v {
			*dst, changed = v, true
		}
	}
	for r := range s.regs {
		set(&s.regs[r], joinAval(s.regs[r], o.regs[r]))
	}
	set(&s.any, joinAval(s.any, o.any))
	for k, v := range o.stack {
		old := s.stack[k]
		if j := joinAval(old, v); j != old || !hasKey(s.stack, k) {
			s.stack[k], changed = j, true
		}
	}
	for k, v := range s.stack {
		if !hasKey(o.stack, k) {
			set(&v, joinAval(v, aval{}))
			s.stack[k] = v
		}
	}
	return changed
}

func hasKey(m map[int]aval, k int) bool { _, ok := m[k]; return ok }

type addOnly struct {
	insns asm.Instructions
	fl    *flow
	names []string
	idx   map[string]int
	fail  uint64      // maps used otherwise than by adds
	width map[int]int // map index -> add width; -1: adds of two widths
	fnOf  []int       // instruction -> the start of its function
}

func (a *addOnly) bit(name string) uint64 {
	if i, ok := a.idx[name]; ok && i < 64 {
		return 1 << i
	}
	return 0
}

func (a *addOnly) addWidth(bits uint64, w int) {
	for i := 0; bits != 0 && i < 64; i++ {
		if bits&(1<<i) == 0 {
			continue
		}
		bits &^= 1 << i
		switch old := a.width[i]; {
		case old == 0:
			a.width[i] = w
		case old != w:
			a.width[i] = -1
		}
	}
}

// run analyses every function from its entry and returns the state before
// each instruction (nil: never reached).
func (a *addOnly) run() []*astate {
	n := len(a.insns)
	a.fnOf = make([]int, n)
	starts := map[int]bool{}
	for _, s := range a.fl.starts {
		starts[s] = true
	}
	cur := 0
	for i := range n {
		if starts[i] {
			cur = i
		}
		a.fnOf[i] = cur
	}
	in := make([]*astate, n)
	var work []int
	for _, s := range a.fl.starts {
		st := &astate{stack: map[int]aval{}}
		st.regs[asm.R10] = aval{fp: fpAt}
		in[s] = st
		work = append(work, s)
	}
	for len(work) > 0 {
		i := work[len(work)-1]
		work = work[:len(work)-1]
		s := in[i].clone()
		for _, j := range a.step(i, s) {
			if j < 0 || j >= n {
				continue
			}
			if in[j] == nil {
				in[j] = s.clone()
				work = append(work, j)
			} else if in[j].merge(s) {
				work = append(work, j)
			}
		}
	}
	return in
}

// slotsOf is the 8-byte slots an access of size bytes at r10+off touches.
func slotsOf(off, size int) (lo, hi int) {
	return floorDiv(off, 8), floorDiv(off+size-1, 8)
}

func floorDiv(a, b int) int {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// load is what a size-byte load at base+off gives (base a stack pointer).
func (s *astate) load(base aval, off, size int) aval {
	v := s.any
	if base.fp == fpAt {
		lo, hi := slotsOf(base.off+off, size)
		for k := lo; k <= hi; k++ {
			v = joinAval(v, s.stack[k])
		}
		return v
	}
	for _, sv := range s.stack {
		v = joinAval(v, sv)
	}
	return v
}

// store puts v at base+off (base a stack pointer): replacing the slot for
// an aligned 8-byte store at a known offset, else joined into what may be
// there.
func (s *astate) store(base aval, off, size int, v aval) {
	if base.fp != fpAt {
		s.any = joinAval(s.any, v)
		return
	}
	o := base.off + off
	lo, hi := slotsOf(o, size)
	if size == 8 && o%8 == 0 {
		s.stack[lo] = v
		return
	}
	for k := lo; k <= hi; k++ {
		s.stack[k] = joinAval(s.stack[k], v)
	}
}

// stackBits is every map bit anywhere in the stack.
func (s *astate) stackBits() uint64 {
	b := s.any.bits()
	for _, v := range s.stack {
		b |= v.bits()
	}
	return b
}

// step applies instruction i to s and returns its successors.
func (a *addOnly) step(i int, s *astate) []int {
	ins := &a.insns[i]
	op := ins.OpCode
	next := []int{i + 1}
	size := sizeBytes(op.Size())
	switch cls := op.Class(); {
	case cls == asm.LdClass:
		switch {
		case op.Mode() == asm.ImmMode && op.Size() == asm.DWord:
			v := aval{}
			if ins.IsLoadFromMap() {
				switch ins.Src {
				case asm.PseudoMapFD:
					v.hnd = a.bit(ins.Reference())
				default: // a value's address
					v.ptr = a.bit(ins.Reference())
				}
			}
			s.regs[ins.Dst] = v
		default: // legacy packet loads: r0, the argument registers clobbered
			for r := asm.R0; r <= asm.R5; r++ {
				s.regs[r] = aval{}
			}
		}
	case cls == asm.LdXClass:
		base := s.regs[ins.Src]
		a.fail |= base.bits() // a map's value read
		v := aval{}
		if base.fp != 0 {
			v = s.load(base, int(ins.Offset), size)
		}
		s.regs[ins.Dst] = v
	case cls == asm.StClass:
		base := s.regs[ins.Dst]
		a.fail |= base.bits()
		if base.fp != 0 {
			s.store(base, int(ins.Offset), size, aval{})
		}
	case cls == asm.StXClass:
		base, v := s.regs[ins.Dst], s.regs[ins.Src]
		if op.Mode() != asm.AtomicMode {
			a.stx(s, base, v, int(ins.Offset), size)
			break
		}
		switch aop := op.AtomicOp(); {
		case aop == asm.AtomicOp(0x0001_0000): // load-acquire: dst = *(src+off)
			src := s.regs[ins.Src]
			a.fail |= src.bits()
			out := aval{}
			if src.fp != 0 {
				out = s.load(src, int(ins.Offset), size)
			}
			s.regs[ins.Dst] = out
		case aop == asm.AtomicOp(0x0001_1000): // store-release
			a.stx(s, base, v, int(ins.Offset), size)
		default:
			a.fail |= v.bits() // a map pointer stored (or swapped) somewhere
			fetch := aop&0x100 != 0 || aop == asm.Xchg || aop == asm.CmpXchg
			if base.ptr != 0 && aop == asm.AddAtomic && (size == 4 || size == 8) {
				a.addWidth(base.ptr, size)
			} else {
				a.fail |= base.ptr
			}
			a.fail |= base.hnd
			old := aval{}
			if base.fp != 0 {
				old = s.load(base, int(ins.Offset), size)
				s.store(base, int(ins.Offset), size, joinAval(old, v))
			}
			if fetch {
				s.regs[ins.Src] = old
				if aop == asm.CmpXchg {
					s.regs[asm.R0] = old
				}
			}
		}
	case cls.IsALU():
		a.alu(s, ins)
	case cls.IsJump():
		jop := op.JumpOp()
		switch {
		case jop == asm.Exit:
			if a.fnOf[i] != 0 {
				a.fail |= s.regs[asm.R0].bits() // returned to a caller
			}
			return nil
		case jop == asm.Call && ins.IsBuiltinCall():
			a.call(s, ins)
		case jop == asm.Call: // a function of the program
			for r := asm.R1; r <= asm.R5; r++ {
				a.fail |= s.regs[r].bits()
				if s.regs[r].fp != 0 {
					a.fail |= s.stackBits() // the callee may read the caller's stack
				}
			}
			for r := asm.R0; r <= asm.R5; r++ {
				s.regs[r] = aval{}
			}
		case jop == asm.Ja:
			return []int{a.fl.target[i]}
		default:
			return []int{i + 1, a.fl.target[i]}
		}
	}
	return next
}

// stx stores register value v at base+off.
func (a *addOnly) stx(s *astate, base, v aval, off, size int) {
	a.fail |= base.bits() // a map's value written
	if base.fp != 0 {
		s.store(base, off, size, v)
		return
	}
	a.fail |= v.bits() // a map pointer kept outside the stack
}

// call is a helper call: bpf_map_lookup_elem makes a pointer into the
// map's values; a map handed to any other helper, or a map pointer in an
// argument a helper reads or writes through, is a use.
func (a *addOnly) call(s *astate, ins *asm.Instruction) {
	r0 := aval{}
	// the registers the helper reads memory through or hands on (the ctx
	// analysis's table; a helper missing from it: all five)
	through, known := ctxPtrArgs[ins.Constant]
	if !known {
		through = 0x3e
	}
	if ins.Constant == hMapLookup {
		r0.ptr = s.regs[asm.R1].hnd
	} else {
		a.fail |= s.regs[asm.R1].hnd // a map updated, deleted from, handed on
	}
	for r := asm.R1; r <= asm.R5; r++ {
		if through&(1<<r) != 0 {
			a.fail |= s.regs[r].ptr
		}
		if r != asm.R1 {
			a.fail |= s.regs[r].hnd
		}
	}
	for r := asm.R1; r <= asm.R5; r++ {
		s.regs[r] = aval{}
	}
	s.regs[asm.R0] = r0
}

// alu keeps a pointer's maps in whatever is computed from it (a pointer
// moved on by a constant stays one; anything else computed from it is at
// worst that pointer), and the stack pointer's offset where it is known.
func (a *addOnly) alu(s *astate, ins *asm.Instruction) {
	op := ins.OpCode
	dst := s.regs[ins.Dst]
	src := aval{}
	if op.Source() == asm.RegSource {
		src = s.regs[ins.Src]
	}
	is64 := op.Class() == asm.ALU64Class
	switch aop := op.ALUOp(); {
	case aop == asm.Mov && op.Source() == asm.RegSource && is64 && ins.Offset == 0:
		s.regs[ins.Dst] = src
		return
	case aop == asm.Mov && op.Source() == asm.ImmSource:
		s.regs[ins.Dst] = aval{}
		return
	case (aop == asm.Add || aop == asm.Sub) && is64 && op.Source() == asm.ImmSource:
		if dst.fp == fpAt {
			if aop == asm.Add {
				dst.off += int(ins.Constant)
			} else {
				dst.off -= int(ins.Constant)
			}
		}
		s.regs[ins.Dst] = dst
		return
	case aop == asm.Mov: // 32-bit or sign-extending moves
		dst = aval{}
	}
	out := aval{ptr: dst.ptr | src.ptr, hnd: dst.hnd | src.hnd}
	if dst.fp != 0 || src.fp != 0 {
		out.fp = fpSome
	}
	s.regs[ins.Dst] = out
}
