package jit

import (
	"github.com/cilium/ebpf/asm"

	"github.com/gpubpf/gpubpf/pkg/runtime/gpumap"
)

// Loads from read-only global data (Options.Constants: .rodata, where the
// tools keep their const volatile knobs) at an offset the compiler can
// follow are compiled as immediates. clang loads a knob's address once and
// keeps it in a callee-saved register across blocks and calls, so the
// pointers are followed through the function's control flow (roFlow), not
// only within a block.

// roPtr: a register holds the address of byte off of data, the contents of
// read-only global data; data is nil when it holds anything else.
type roPtr struct {
	name string // the map's
	data []byte
	off  int64
}

type roState [11]roPtr

// roStep applies ins to st.
func (c *compiler) roStep(ins *asm.Instruction, st *roState) {
	op := ins.OpCode
	cls := op.Class()
	if ins.Dst > asm.R10 {
		return
	}
	switch {
	case cls.IsALU():
		if ins.Dst == asm.R10 {
			return
		}
		d := roPtr{}
		switch {
		case cls == asm.ALU64Class && op.ALUOp() == asm.Mov && op.Source() == asm.RegSource && ins.Src <= asm.R10:
			d = st[ins.Src]
		case cls == asm.ALU64Class && op.ALUOp() == asm.Add && op.Source() == asm.ImmSource && st[ins.Dst].data != nil:
			d = st[ins.Dst]
			d.off += ins.Constant
		}
		st[ins.Dst] = d
	case cls == asm.LdClass:
		st[ins.Dst] = roPtr{}
		if ins.Src == asm.PseudoMapValue {
			if mi, ok := c.mapIdx[ins.Reference()]; ok {
				m := c.maps[mi]
				if data := c.opts.Constants[m.name]; data != nil && m.p.Kind == gpumap.Array {
					st[ins.Dst] = roPtr{m.name, data, int64(uint32(uint64(ins.Constant) >> 32))}
				}
			}
		}
	case cls == asm.LdXClass:
		st[ins.Dst] = roPtr{}
	case cls == asm.StXClass && op.Mode() == asm.AtomicMode:
		if ins.Src <= asm.R10 {
			st[ins.Src] = roPtr{}
		}
		st[0] = roPtr{}
	case cls.IsJump() && op.JumpOp() == asm.Call:
		for r := 0; r <= 5; r++ {
			st[r] = roPtr{}
		}
	}
}

// roFlow is, at each instruction of sp, what every path to it agrees each
// register points into (nil where no path reaches it).
func (c *compiler) roFlow(sp *subprog) []*roState {
	return forward(c, sp, roState{}, c.roStep, func(old, in *roState) (changed bool) {
		for k := range in {
			if old[k].data != nil && (old[k].name != in[k].name || in[k].data == nil || old[k].off != in[k].off) {
				old[k], changed = roPtr{}, true
			}
		}
		return changed
	})
}

// roLoad is the value a load of sz bytes at off from register r reads when
// r points into read-only global data.
func (c *compiler) roLoad(r asm.Register, off int16, sz int, signed bool) (int64, bool) {
	if r > asm.R10 {
		return 0, false
	}
	p := c.ro[r]
	at := p.off + int64(off)
	if p.data == nil || at < 0 || at+int64(sz) > int64(len(p.data)) || (signed && sz == 8) {
		return 0, false
	}
	var v uint64
	for k := sz - 1; k >= 0; k-- {
		v = v<<8 | uint64(p.data[at+int64(k)])
	}
	if signed {
		return int64(v<<(64-8*sz)) >> (64 - 8*sz), true
	}
	return int64(v), true
}
