package jit

import (
	"fmt"
	"strings"

	"github.com/cilium/ebpf/asm"

	"github.com/gpubpf/gpubpf/pkg/runtime/gpumap"
)

func (c *compiler) e(format string, a ...any) {
	c.b.WriteByte('\t')
	fmt.Fprintf(c.b, format, a...)
	c.b.WriteByte('\n')
}

func (c *compiler) label() string {
	c.labels++
	return fmt.Sprintf("$T%d", c.labels)
}

func reg(r asm.Register) string { return fmt.Sprintf("%%r%d", r) }

// compileFunc emits one bpf function as a PTX .func.
func (c *compiler) compileFunc(sp *subprog) (string, error) {
	var body strings.Builder
	body.Grow((sp.end - sp.start) * 96)
	c.b = &body
	isTarget := map[int]bool{}
	c.isTarget = isTarget
	usesStack := false
	for i := sp.start; i < sp.end; i++ {
		ins := &c.insns[i]
		if t := c.target[i]; t >= 0 && !ins.IsFunctionCall() {
			isTarget[t] = true
		}
		r, w := regUse(ins)
		if (r|w)&(1<<10) != 0 {
			usesStack = true
		}
		if ins.Dst == asm.R10 || (ins.Src == asm.R10 && ins.OpCode.Class() != asm.LdClass && !ins.OpCode.Class().IsJump()) {
			usesStack = true
		}
	}
	// Map identity per register (index into c.maps, -1 unknown) so helper
	// calls on a statically known map get direct code.
	known := [11]int{}
	// What the stack analysis knows at a label: the stack pointers whose
	// offsets all paths agree on keep their constant-offset accesses.
	flow := c.fpFlow(sp)
	roIn := c.roFlow(sp)
	c.stackMem, c.stackAll = [stackSlots]bool{}, false
	reset := func(i int) {
		for k := range known {
			known[k] = -1
		}
		c.ro = roState{}
		if st := roIn[i-sp.start]; st != nil {
			c.ro = *st
		}
		c.fpOK = [11]bool{10: true}
		c.fp = [11]int{}
		if st := flow[i-sp.start]; st != nil {
			for r := 0; r < 10; r++ {
				if v := st[r]; v.kind == fpExact && v.off >= -StackSize && v.off <= 0 {
					c.fpOK[r], c.fp[r] = true, int(v.off)
				}
			}
		}
	}
	heads := c.loopHeads(sp)
	reset(sp.start)
	for i := sp.start; i < sp.end; i++ {
		c.cur = i
		if isTarget[i] {
			fmt.Fprintf(c.b, "$L%d:\n", i)
			reset(i)
		}
		if heads[i] {
			c.e("add.u64 %%lb, %%lb, 1;")
			c.e("setp.gt.u64 %%plb, %%lb, %d;", c.opts.LoopBudget)
			c.e("@%%plb bra $LB%d;", sp.start)
		}
		ins := &c.insns[i]
		c.stackUse(ins, flow[i-sp.start], &known)
		if err := c.insn(i, ins, &known); err != nil {
			return "", c.errAt(i, err)
		}
		c.roStep(ins, &c.ro)
	}
	last := &c.insns[sp.end-1]
	if j := last.OpCode.JumpOp(); !last.OpCode.Class().IsJump() || (j != asm.Exit && j != asm.Ja) {
		return "", c.errAt(sp.end-1, fmt.Errorf("function starting at instruction %d falls off its end", sp.start))
	}
	if len(heads) > 0 {
		// The budget spent: counted once per return, and r0 = 0 back to
		// the caller, as the twin's may_goto exit.
		fmt.Fprintf(c.b, "$LB%d:\n", sp.start)
		c.e("mov.u64 %%t7, %s;", imm64(int64(c.opts.Printk.Addr+gpumap.OffBudget)))
		c.e("red.global.add.u64 [%%t7], 1;")
		c.e("mov.u64 %%r0, 0;")
		c.e("st.param.b64 [ret], %%r0;")
		c.e("ret;")
	}

	var f, inner strings.Builder
	if sp.start == 0 {
		fmt.Fprintf(&f, ".visible .func (.param .b64 ret) %s(.param .b64 ctx)\n{\n", sp.name)
	} else {
		fmt.Fprintf(&f, ".func (.param .b64 ret) %s(.param .b64 a1, .param .b64 a2, .param .b64 a3, .param .b64 a4, .param .b64 a5)\n{\n", sp.name)
	}
	fw := &inner
	fw.WriteString("\t.reg .b64 %r<11>;\n\t.reg .b64 %t<12>;\n\t.reg .b32 %w<12>;\n\t.reg .pred %p<4>;\n")
	if len(heads) > 0 {
		fw.WriteString("\t.reg .b64 %lb;\n\t.reg .pred %plb;\n\tmov.u64 %lb, 0;\n")
	}
	text := body.String()
	var slots []int
	if usesStack && !c.stackAll {
		text, slots = promoteStack(text, &c.stackMem)
	}
	if len(slots) > 0 {
		fmt.Fprintf(fw, "\t.reg .b64 %%gs<%d>;\n\t.reg .b64 %%gsx;\n", stackSlots)
		for _, k := range slots {
			fmt.Fprintf(fw, "\tmov.b64 %%gs%d, 0;\n", k)
		}
	}
	frame := 0
	if usesStack {
		text, frame = c.trimFrame(text)
	}
	if frame > 0 {
		fmt.Fprintf(fw, "\t.local .align 16 .b8 stk[%d];\n", frame)
	}
	// Registers the verifier would call uninitialised start at 0 so ptxas
	// never sees a read of an undefined register.
	for r := 0; r <= 9; r++ {
		fmt.Fprintf(fw, "\tmov.u64 %%r%d, 0;\n", r)
	}
	if sp.start == 0 {
		fw.WriteString("\tld.param.u64 %r1, [ctx];\n")
	} else {
		for r := 1; r <= 5; r++ {
			fmt.Fprintf(fw, "\tld.param.u64 %%r%d, [a%d];\n", r, r)
		}
	}
	if frame > 0 {
		fmt.Fprintf(fw, "\tmov.u64 %%r10, stk;\n\tcvta.local.u64 %%r10, %%r10;\n\tadd.u64 %%r10, %%r10, %d;\n", frame)
	} else {
		fw.WriteString("\tmov.u64 %r10, 0;\n")
	}
	inner.WriteString(text)
	f.WriteString(inner.String())
	f.WriteString("}\n\n")
	if sp.start == 0 {
		c.inline = inner.String()
	}
	return f.String(), nil
}

// loopHeads are sp's loop heads when the program runs with a loop budget
// (Options.LoopBudget): LoopHeads' rule, the verifier's too.
func (c *compiler) loopHeads(sp *subprog) map[int]bool {
	if c.opts.LoopBudget == 0 {
		return nil
	}
	heads := map[int]bool{}
	for t := range c.flow.loopHeads(c.insns, sp.start, sp.end) {
		heads[t] = true
	}
	return heads
}

func imm64(v int64) string { return fmt.Sprintf("0x%X", uint64(v)) }
func imm32(v int64) string { return fmt.Sprintf("0x%X", uint32(v)) }

// addr returns a PTX address operand for base+off and the state space
// suffix: direct .local addressing for r10-relative accesses (which lets
// ptxas keep stack slots in registers), generic otherwise.
func (c *compiler) addr(base asm.Register, off int16, size int) (string, string, error) {
	if base == asm.R10 || c.fpOK[base] {
		o := StackSize + c.fp[base] + int(off)
		if o < 0 || o+size > StackSize {
			return "", "", fmt.Errorf("stack access at r10%+d (%d bytes) is outside the %d-byte stack", c.fp[base]+int(off), size, StackSize)
		}
		return fmt.Sprintf("[stk+%d]", o), ".local", nil
	}
	return fmt.Sprintf("[%s+%d]", reg(base), off), "", nil
}

// ptr is addr for helper arguments: the .local form when the pointer is a
// known stack slot, the generic form otherwise (never an error: a pointer
// the tracking got wrong is still a valid generic address).
func (c *compiler) ptr(base asm.Register, off, size int) (string, string) {
	if base <= asm.R10 && (base == asm.R10 || c.fpOK[base]) {
		o := StackSize + c.fp[base] + off
		if o >= 0 && o+size <= StackSize {
			return fmt.Sprintf("[stk+%d]", o), ".local"
		}
	}
	return fmt.Sprintf("[%s+%d]", reg(base), off), ""
}

// trackFP updates which registers hold r10+constant after ins.
func (c *compiler) trackFP(ins *asm.Instruction) {
	op := ins.OpCode
	_, w := regUse(ins)
	if op.Class() == asm.ALU64Class && ins.Dst != asm.R10 {
		a := op.ALUOp()
		switch {
		case a == asm.Mov && op.Source() == asm.RegSource:
			c.fpOK[ins.Dst], c.fp[ins.Dst] = c.fpOK[ins.Src], c.fp[ins.Src]
			return
		case (a == asm.Add || a == asm.Sub) && op.Source() == asm.ImmSource && c.fpOK[ins.Dst]:
			d := int(ins.Constant)
			if a == asm.Sub {
				d = -d
			}
			c.fp[ins.Dst] += d
			if c.fp[ins.Dst] < -StackSize || c.fp[ins.Dst] > 0 {
				c.fpOK[ins.Dst] = false
			}
			return
		}
	}
	for r := 0; r < 10; r++ {
		if w&(1<<r) != 0 {
			c.fpOK[r] = false
		}
	}
}

func sizeBytes(s asm.Size) int {
	switch s {
	case asm.Byte:
		return 1
	case asm.Half:
		return 2
	case asm.Word:
		return 4
	case asm.DWord:
		return 8
	}
	return 0
}

func (c *compiler) insn(i int, ins *asm.Instruction, known *[11]int) error {
	op := ins.OpCode
	if op == asm.InvalidOpCode {
		return fmt.Errorf("invalid opcode")
	}
	if ins.Dst > asm.R10 || (ins.Src > asm.R10 && op.Class() != asm.LdClass && !(op.Class().IsJump() && op.JumpOp() == asm.Call)) {
		return fmt.Errorf("invalid register")
	}
	cls := op.Class()
	// Track stack pointers derived from r10 (so their accesses use .local
	// addressing, which ptxas can keep in registers).
	defer c.trackFP(ins)
	// Track map identities.
	defer func() {
		if cls.IsALU() || cls == asm.LdXClass || (cls == asm.LdClass && !ins.IsLoadFromMap()) {
			if cls.IsALU() && op.ALUOp() == asm.Mov && op.Source() == asm.RegSource && cls == asm.ALU64Class {
				known[ins.Dst] = known[ins.Src]
			} else {
				known[ins.Dst] = -1
			}
		}
		if cls == asm.StXClass && op.Mode() == asm.AtomicMode {
			known[ins.Src], known[0] = -1, -1
		}
	}()
	switch {
	case cls.IsALU():
		if ins.Dst == asm.R10 {
			return fmt.Errorf("r10 (frame pointer) is read-only")
		}
		return c.alu(ins)
	case cls == asm.LdClass:
		return c.ldImm(ins, known)
	case cls == asm.LdXClass:
		if ins.Dst == asm.R10 {
			return fmt.Errorf("r10 (frame pointer) is read-only")
		}
		sz := sizeBytes(op.Size())
		if v, ok := c.roLoad(ins.Src, ins.Offset, sz, op.Mode() == asm.MemSXMode); ok {
			c.e("mov.u64 %s, %s;", reg(ins.Dst), imm64(v))
			return nil
		}
		a, space, err := c.addr(ins.Src, ins.Offset, sz)
		if err != nil {
			return err
		}
		switch op.Mode() {
		case asm.MemMode:
			c.e("ld%s.u%d %s, %s;", space, sz*8, reg(ins.Dst), a)
		case asm.MemSXMode:
			if sz == 8 {
				return unsupported("sign-extending 64-bit load")
			}
			c.e("ld%s.s%d %s, %s;", space, sz*8, reg(ins.Dst), a)
		default:
			return unsupported("load mode %v", op.Mode())
		}
		return nil
	case cls == asm.StClass:
		if op.Mode() != asm.MemMode {
			return unsupported("store mode %v", op.Mode())
		}
		sz := sizeBytes(op.Size())
		a, space, err := c.addr(ins.Dst, ins.Offset, sz)
		if err != nil {
			return err
		}
		c.e("mov.u64 %%t0, %s;", imm64(ins.Constant))
		c.e("st%s.u%d %s, %%t0;", space, sz*8, a)
		return nil
	case cls == asm.StXClass:
		switch op.Mode() {
		case asm.MemMode:
			sz := sizeBytes(op.Size())
			a, space, err := c.addr(ins.Dst, ins.Offset, sz)
			if err != nil {
				return err
			}
			c.e("st%s.u%d %s, %s;", space, sz*8, a, reg(ins.Src))
			return nil
		case asm.AtomicMode:
			return c.atomic(ins)
		}
		return unsupported("store mode %v", op.Mode())
	case cls.IsJump():
		return c.jump(i, ins, known)
	}
	return unsupported("instruction class %v", cls)
}

func (c *compiler) ldImm(ins *asm.Instruction, known *[11]int) error {
	op := ins.OpCode
	if op.Mode() != asm.ImmMode || op.Size() != asm.DWord {
		return unsupported("legacy packet access (%v)", op)
	}
	if ins.Dst == asm.R10 {
		return fmt.Errorf("r10 (frame pointer) is read-only")
	}
	switch ins.Src {
	case 0:
		c.e("mov.u64 %s, %s;", reg(ins.Dst), imm64(ins.Constant))
		return nil
	case asm.PseudoMapFD, asm.PseudoMapValue:
		mi := c.mapIdx[ins.Reference()]
		m := c.maps[mi]
		if ins.Src == asm.PseudoMapFD {
			c.e("mov.u64 %s, %s;", reg(ins.Dst), imm64(int64(m.p.Addr)))
			known[ins.Dst] = mi
			return nil
		}
		off := uint64(uint32(uint64(ins.Constant) >> 32))
		base, err := directValueBase(m)
		if err != nil {
			return err
		}
		c.e("mov.u64 %s, %s;", reg(ins.Dst), imm64(int64(base+off)))
		known[ins.Dst] = -1
		return nil
	case asm.PseudoFunc:
		return unsupported("function pointers (bpf_loop/callbacks)")
	}
	return unsupported("64-bit immediate of pseudo source %d", ins.Src)
}

func (c *compiler) alu(ins *asm.Instruction) error {
	op := ins.OpCode
	is64 := op.Class() == asm.ALU64Class
	a := op.ALUOp()
	d := reg(ins.Dst)
	regSrc := op.Source() == asm.RegSource
	if a == asm.Swap {
		return c.swap(ins)
	}
	if is64 {
		src := imm64(ins.Constant)
		if regSrc {
			src = reg(ins.Src)
		}
		switch a {
		case asm.Add, asm.Sub, asm.Or, asm.And, asm.Xor:
			c.e("%s %s, %s, %s;", alu64Names[a], d, d, src)
		case asm.Mul:
			c.e("mul.lo.u64 %s, %s, %s;", d, d, src)
		case asm.Mov:
			c.e("mov.u64 %s, %s;", d, src)
		case asm.MovSX8, asm.MovSX16, asm.MovSX32:
			if !regSrc {
				return unsupported("movsx with an immediate source")
			}
			bitsN := 8 << ((a - asm.MovSX8) >> 8) // 8, 16, 32
			c.e("shl.b64 %%t0, %s, %d;", src, 64-bitsN)
			c.e("shr.s64 %s, %%t0, %d;", d, 64-bitsN)
		case asm.Neg:
			c.e("neg.s64 %s, %s;", d, d)
		case asm.LSh, asm.RSh, asm.ArSh:
			ptxop := shift64Names[a]
			if regSrc {
				c.e("cvt.u32.u64 %%w0, %s;", src)
				c.e("and.b32 %%w0, %%w0, 63;")
				c.e("%s %s, %s, %%w0;", ptxop, d, d)
			} else {
				c.e("%s %s, %s, %d;", ptxop, d, d, ins.Constant&63)
			}
		case asm.Div, asm.Mod, asm.SDiv, asm.SMod:
			c.div(a, d, src, 64)
		default:
			return unsupported("ALU64 operation %v", a)
		}
		return nil
	}
	// ALU32: work on the low halves, zero-extend the result.
	c.e("cvt.u32.u64 %%w1, %s;", d)
	src := imm32(ins.Constant)
	if regSrc {
		c.e("cvt.u32.u64 %%w2, %s;", reg(ins.Src))
		src = "%w2"
	}
	switch a {
	case asm.Add:
		c.e("add.u32 %%w1, %%w1, %s;", src)
	case asm.Sub:
		c.e("sub.u32 %%w1, %%w1, %s;", src)
	case asm.Mul:
		c.e("mul.lo.u32 %%w1, %%w1, %s;", src)
	case asm.Or:
		c.e("or.b32 %%w1, %%w1, %s;", src)
	case asm.And:
		c.e("and.b32 %%w1, %%w1, %s;", src)
	case asm.Xor:
		c.e("xor.b32 %%w1, %%w1, %s;", src)
	case asm.Mov:
		c.e("mov.u32 %%w1, %s;", src)
	case asm.MovSX8, asm.MovSX16:
		if !regSrc {
			return unsupported("movsx with an immediate source")
		}
		n := 8
		if a == asm.MovSX16 {
			n = 16
		}
		c.e("shl.b32 %%w1, %s, %d;", src, 32-n)
		c.e("shr.s32 %%w1, %%w1, %d;", 32-n)
	case asm.Neg:
		c.e("neg.s32 %%w1, %%w1;")
	case asm.LSh, asm.RSh, asm.ArSh:
		ptxop := shift32Names[a]
		if regSrc {
			c.e("and.b32 %%w2, %%w2, 31;")
			c.e("%s %%w1, %%w1, %%w2;", ptxop)
		} else {
			c.e("%s %%w1, %%w1, %d;", ptxop, ins.Constant&31)
		}
	case asm.Div, asm.Mod, asm.SDiv, asm.SMod:
		c.div(a, "%w1", src, 32)
	default:
		return unsupported("ALU32 operation %v", a)
	}
	c.e("cvt.u64.u32 %s, %%w1;", d)
	return nil
}

// div emits the kernel's division semantics: x/0 = 0, x%0 = x, and for the
// signed forms x/-1 = -x and x%-1 = 0 (no overflow trap on INT_MIN/-1).
func (c *compiler) div(a asm.ALUOp, d, src string, bitsN int) {
	t, ty, p := "%t1", fmt.Sprintf("%d", bitsN), "%p1"
	if bitsN == 32 {
		t = "%w3"
	}
	c.e("setp.eq.u%s %s, %s, 0;", ty, p, src)
	c.e("selp.b%s %s, 1, %s, %s;", ty, t, src, p)
	switch a {
	case asm.Div:
		c.e("div.u%s %s, %s, %s;", ty, t, d, t)
		c.e("selp.b%s %s, 0, %s, %s;", ty, d, t, p)
	case asm.Mod:
		c.e("rem.u%s %s, %s, %s;", ty, t, d, t)
		c.e("selp.b%s %s, %s, %s, %s;", ty, d, d, t, p)
	case asm.SDiv, asm.SMod:
		// Divisor -1 is handled apart: INT_MIN / -1 overflows in hardware.
		c.e("setp.eq.s%s %%p2, %s, -1;", ty, t)
		c.e("selp.b%s %s, 1, %s, %%p2;", ty, t, t)
		if a == asm.SDiv {
			c.e("div.s%s %s, %s, %s;", ty, t, d, t)
			c.e("@%%p2 neg.s%s %s, %s;", ty, t, d)
			c.e("selp.b%s %s, 0, %s, %s;", ty, d, t, p)
		} else {
			c.e("rem.s%s %s, %s, %s;", ty, t, d, t)
			c.e("@%%p2 mov.b%s %s, 0;", ty, t)
			c.e("selp.b%s %s, %s, %s, %s;", ty, d, d, t, p)
		}
	}
}

func (c *compiler) swap(ins *asm.Instruction) error {
	d := reg(ins.Dst)
	size := ins.Constant
	if size != 16 && size != 32 && size != 64 {
		return unsupported("byte swap of %d bits", size)
	}
	// The Source bit carries the endianness (cilium/ebpf's Source() hides it for Swap).
	beBit := ins.OpCode&0x08 != 0
	toBE := ins.OpCode.Class() == asm.ALU64Class || beBit
	if ins.OpCode.Class() == asm.ALU64Class && beBit {
		return unsupported("ALU64 byte swap with the BE flag (reserved encoding)")
	}
	if !toBE {
		// Host (GPU and x86) is little-endian: le16/le32 truncate.
		switch size {
		case 16:
			c.e("and.b64 %s, %s, 0xFFFF;", d, d)
		case 32:
			c.e("and.b64 %s, %s, 0xFFFFFFFF;", d, d)
		}
		return nil
	}
	switch size {
	case 16:
		c.e("cvt.u32.u64 %%w1, %s;", d)
		c.e("prmt.b32 %%w1, %%w1, 0, 0x4401;")
		c.e("cvt.u64.u32 %s, %%w1;", d)
	case 32:
		c.e("cvt.u32.u64 %%w1, %s;", d)
		c.e("prmt.b32 %%w1, %%w1, 0, 0x0123;")
		c.e("cvt.u64.u32 %s, %%w1;", d)
	case 64:
		c.e("mov.b64 {%%w1, %%w2}, %s;", d)
		c.e("prmt.b32 %%w3, %%w2, 0, 0x0123;")
		c.e("prmt.b32 %%w4, %%w1, 0, 0x0123;")
		c.e("mov.b64 %s, {%%w3, %%w4};", d)
	}
	return nil
}

var (
	alu64Names   = map[asm.ALUOp]string{asm.Add: "add.u64", asm.Sub: "sub.u64", asm.Or: "or.b64", asm.And: "and.b64", asm.Xor: "xor.b64"}
	shift64Names = map[asm.ALUOp]string{asm.LSh: "shl.b64", asm.RSh: "shr.u64", asm.ArSh: "shr.s64"}
	shift32Names = map[asm.ALUOp]string{asm.LSh: "shl.b32", asm.RSh: "shr.u32", asm.ArSh: "shr.s32"}
)

var cmpOps = map[asm.JumpOp]string{
	asm.JEq: "eq.u", asm.JNE: "ne.u", asm.JGT: "gt.u", asm.JGE: "ge.u", asm.JLT: "lt.u", asm.JLE: "le.u",
	asm.JSGT: "gt.s", asm.JSGE: "ge.s", asm.JSLT: "lt.s", asm.JSLE: "le.s",
}

func (c *compiler) jump(i int, ins *asm.Instruction, known *[11]int) error {
	op := ins.OpCode
	jop := op.JumpOp()
	switch jop {
	case asm.Exit:
		c.e("st.param.b64 [ret], %%r0;")
		c.e("ret;")
		return nil
	case asm.Call:
		return c.call(i, ins, known)
	case asm.Ja:
		c.e("bra.uni $L%d;", c.target[i])
		return nil
	case asm.JCOND:
		return unsupported("may_goto")
	}
	is32 := op.Class() == asm.Jump32Class
	var a, b string
	if is32 {
		c.e("cvt.u32.u64 %%w1, %s;", reg(ins.Dst))
		a = "%w1"
		if op.Source() == asm.RegSource {
			c.e("cvt.u32.u64 %%w2, %s;", reg(ins.Src))
			b = "%w2"
		} else {
			b = imm32(ins.Constant)
		}
	} else {
		a = reg(ins.Dst)
		if op.Source() == asm.RegSource {
			b = reg(ins.Src)
		} else {
			b = imm64(ins.Constant)
		}
	}
	w := 64
	if is32 {
		w = 32
	}
	if c.firstThreadTest(i, ins) {
		return nil
	}
	if jop == asm.JSet {
		if is32 {
			c.e("and.b32 %%w3, %s, %s;", a, b)
			c.e("setp.ne.u32 %%p0, %%w3, 0;")
		} else {
			c.e("and.b64 %%t1, %s, %s;", a, b)
			c.e("setp.ne.u64 %%p0, %%t1, 0;")
		}
	} else {
		cmp, ok := cmpOps[jop]
		if !ok {
			return unsupported("jump operation %v", jop)
		}
		if strings.HasSuffix(cmp, ".s") && !strings.HasPrefix(b, "%") {
			// Signed compare with a hex immediate: PTX wants a signed literal.
			if is32 {
				b = fmt.Sprintf("%d", int32(ins.Constant))
			} else {
				b = fmt.Sprintf("%d", ins.Constant)
			}
		}
		c.e("setp.%s%d %%p0, %s, %s;", cmp, w, a, b)
	}
	c.e("@%%p0 bra $L%d;", c.target[i])
	return nil
}

// firstThreadTest compiles "r0 = bpf_gpu_thread_id(); if r0 ==/!= 0" --
// the first-thread test every thread of an instrumented kernel runs before a
// probe that acts once per launch (launchlate's entry) -- as a test of the
// six index registers instead of the linear id's multiply chain: the id is 0
// exactly when every thread and block index is (every dimension is at least
// 1). The id stays in r0 for any later use; where there is none, ptxas drops
// its computation, and most warps pay one register read and a branch. (A
// grid of 2^54 or more blocks could wrap the 64-bit id to 0 elsewhere; no
// launch is that large.)
func (c *compiler) firstThreadTest(i int, ins *asm.Instruction) bool {
	op := ins.OpCode
	jop := op.JumpOp()
	if i == 0 || c.isTarget[i] || op.Class() != asm.JumpClass || op.Source() != asm.ImmSource ||
		ins.Constant != 0 || ins.Dst != asm.R0 || (jop != asm.JEq && jop != asm.JNE) {
		return false
	}
	if prev := &c.insns[i-1]; !prev.IsBuiltinCall() || prev.Constant != hThreadID {
		return false
	}
	// Every warp pays this test's latency, and a memory-bound kernel of one
	// element a thread pays it in full: its warps spend their lives
	// waiting on loads, so each cycle a warp adds is a cycle with fewer
	// bytes in flight. Reading ctaid.y/ctaid.z (S2UR) and tid.y/tid.z (S2R)
	// in every warp, as one test of all six does, cost vec_add's largest
	// preset 8% on an H100; ctaid.x alone, which the kernel reads anyway,
	// about 2% (docs/gpu-results.md). So only blocks with ctaid.x = 0 read
	// the rest. The warp sync between the two tests keeps ptxas from
	// hoisting those reads above the first branch and merging both tests
	// into one predicate; its mask is the active threads, so a warp that
	// diverged before the probe (an exit probe) syncs only with itself.
	notFirst := fmt.Sprintf("$Lnf_%d", i)
	if jop == asm.JNE {
		notFirst = fmt.Sprintf("$L%d", c.target[i])
	}
	c.e("mov.u32 %%w8, %%ctaid.x;\n\tsetp.ne.u32 %%p0, %%w8, 0;\n\t@%%p0 bra.uni %s;", notFirst)
	c.e("activemask.b32 %%w9;\n\tbar.warp.sync %%w9;")
	c.e("mov.u32 %%w8, %%tid.x;\n\tmov.u32 %%w9, %%tid.y;\n\tmov.u32 %%w10, %%tid.z;\n\tor.b32 %%w8, %%w8, %%w9;\n\tor.b32 %%w8, %%w8, %%w10;")
	c.e("mov.u32 %%w9, %%ctaid.y;\n\tmov.u32 %%w10, %%ctaid.z;\n\tor.b32 %%w8, %%w8, %%w9;\n\tor.b32 %%w8, %%w8, %%w10;")
	c.e("setp.%s.u32 %%p0, %%w8, 0;", map[asm.JumpOp]string{asm.JEq: "eq", asm.JNE: "ne"}[jop])
	c.e("@%%p0 bra $L%d;", c.target[i])
	if jop == asm.JEq {
		fmt.Fprintf(c.b, "%s:\n", notFirst)
	}
	return true
}

// atomic compiles one of BPF's atomic instructions.
func (c *compiler) atomic(ins *asm.Instruction) error {
	op := ins.OpCode
	aop := op.AtomicOp()
	sz := sizeBytes(op.Size())
	ty := fmt.Sprintf("%d", sz*8)
	sc := c.scope
	switch aop {
	case asm.AtomicOp(0x0001_0000), asm.AtomicOp(0x0001_1000):
		// load-acquire / store-release: plain access plus a fence (valid
		// for every state space, including the stack).
		if aop == asm.AtomicOp(0x0001_0000) {
			a, space, err := c.addr(ins.Src, ins.Offset, sz)
			if err != nil {
				return err
			}
			c.e("ld%s.volatile.u%s %s, %s;", space, ty, reg(ins.Dst), a)
			c.e("fence.acq_rel.%s;", sc)
		} else {
			a, space, err := c.addr(ins.Dst, ins.Offset, sz)
			if err != nil {
				return err
			}
			c.e("fence.acq_rel.%s;", sc)
			c.e("st%s.volatile.u%s %s, %s;", space, ty, a, reg(ins.Src))
		}
		return nil
	}
	if sz != 4 && sz != 8 {
		return unsupported("%d-byte atomic", sz)
	}
	var name string
	fetch := aop&0x100 != 0
	switch aop &^ 0x100 {
	case asm.AddAtomic:
		name = "add"
	case asm.OrAtomic:
		name = "or"
	case asm.AndAtomic:
		name = "and"
	case asm.XorAtomic:
		name = "xor"
	case asm.Xchg &^ 0x100:
		name = "exch"
	case asm.CmpXchg &^ 0x100:
		name = "cas"
	default:
		return unsupported("atomic operation %v", aop)
	}
	if (name == "exch" || name == "cas") && !fetch {
		return unsupported("atomic %s without fetch", name)
	}
	return c.rmw(name, fetch, sz, ins.Dst, ins.Offset, ins.Src)
}

// rmw emits the atomic read-modify-write name (add, or, and, xor, exch,
// cas, max) of the sz-byte value at dst+off with the value in srcReg; a
// fetching one leaves the old value in srcReg (cas: in r0, which holds
// the value compared with), as BPF's atomic instructions do.
func (c *compiler) rmw(name string, fetch bool, sz int, dst asm.Register, off int16, srcReg asm.Register) error {
	ty := fmt.Sprintf("%d", sz*8)
	sc := c.scope
	// Operand registers of the right width.
	src, r0, old := reg(srcReg), "%r0", "%t2"
	if sz == 4 {
		c.e("cvt.u32.u64 %%w5, %s;", reg(srcReg))
		c.e("cvt.u32.u64 %%w6, %%r0;")
		src, r0, old = "%w5", "%w6", "%w7"
	}
	ptxTy := "b" + ty
	if name == "add" || name == "max" {
		ptxTy = "u" + ty
	}
	finish := func() {
		switch {
		case name == "cas":
			if sz == 4 {
				c.e("cvt.u64.u32 %%r0, %s;", old)
			} else {
				c.e("mov.u64 %%r0, %s;", old)
			}
		case fetch:
			if sz == 4 {
				c.e("cvt.u64.u32 %s, %s;", reg(srcReg), old)
			} else {
				c.e("mov.u64 %s, %s;", reg(srcReg), old)
			}
		}
	}
	// The stack is private: a plain read-modify-write is atomic enough and
	// PTX atomics on .local memory are undefined.
	plain := func(a, space string) {
		c.e("ld%s.u%s %s, %s;", space, ty, old, a)
		nv := "%t3"
		if sz == 4 {
			nv = "%w8"
		}
		switch name {
		case "add", "max":
			c.e("%s.u%s %s, %s, %s;", name, ty, nv, old, src)
		case "or", "and", "xor":
			c.e("%s.b%s %s, %s, %s;", name, ty, nv, old, src)
		case "exch":
			nv = src
		case "cas":
			c.e("setp.eq.u%s %%p3, %s, %s;", ty, old, r0)
			c.e("selp.b%s %s, %s, %s, %%p3;", ty, nv, src, old)
		}
		c.e("st%s.u%s %s, %s;", space, ty, a, nv)
	}
	if dst == asm.R10 || c.fpOK[dst] {
		a, space, err := c.addr(dst, off, sz)
		if err != nil {
			return err
		}
		plain(a, space)
		finish()
		return nil
	}
	c.e("add.s64 %%t4, %s, %d;", reg(dst), off)
	loc, done := c.label(), c.label()
	c.e("isspacep.local %%p3, %%t4;")
	c.e("@%%p3 bra %s;", loc)
	switch {
	case name == "cas":
		c.e("atom.global.%s.cas.b%s %s, [%%t4], %s, %s;", sc, ty, old, r0, src)
	case fetch || name == "exch":
		c.e("atom.global.%s.%s.%s %s, [%%t4], %s;", sc, name, ptxTy, old, src)
	default:
		c.e("red.global.%s.%s.%s [%%t4], %s;", sc, name, ptxTy, src)
	}
	c.e("bra.uni %s;", done)
	c.b.WriteString(loc + ":\n")
	plain("[%t4]", "")
	c.b.WriteString(done + ":\n")
	finish()
	return nil
}
