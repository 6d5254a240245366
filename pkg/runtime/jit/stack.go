package jit

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/cilium/ebpf/asm"
)

// Stack slots in registers.
//
// The BPF stack is a .local array, and ptxas keeps a .local array in
// memory even where every access has a constant offset: each map key a
// program builds on its stack and each helper out-parameter became a
// local store and load in every GPU thread (threadhist's exit probe: over
// a hundred per kernel). So the compiler keeps the program's 8-byte stack
// slots in PTX registers itself, slot by slot, where it can prove that
// nothing reaches the slot but the accesses it emits with constant
// offsets ([stk+N]): a slot whose address goes anywhere else (a helper or
// subprogram that reads or writes through a generic pointer, a pointer
// stored to memory, an access at an offset not known where it is made)
// stays in memory, and so does every slot when a stack pointer's offset is
// lost. The generic stack pointer (r10) stays valid for those.

const stackSlots = StackSize / 8

// fpVal is what the stack analysis knows of a register: no stack pointer
// (and, where known, the number it holds: a helper's size argument), r10 +
// off, or a stack pointer whose offset is not known (a join of two
// offsets, pointer arithmetic with a register, a join with a non-pointer).
type fpVal struct {
	kind uint8
	off  int64 // fpExact: the offset from r10; fpConst: the number
}

const (
	fpNo uint8 = iota
	fpConst
	fpExact
	fpUnknown
)

func (v fpVal) mayBeFP() bool { return v.kind == fpExact || v.kind == fpUnknown }

func joinFP(a, b fpVal) fpVal {
	if a == b {
		return a
	}
	if !a.mayBeFP() && !b.mayBeFP() {
		return fpVal{}
	}
	return fpVal{kind: fpUnknown}
}

type fpState [11]fpVal

// fpFlow returns, for each instruction of sp, what is known of every
// register before it (a forward data-flow analysis over the function's
// branches; nil for an instruction no path reaches).
func (c *compiler) fpFlow(sp *subprog) []*fpState {
	first := fpState{}
	first[10] = fpVal{kind: fpExact}
	return forward(c, sp, first, fpStep, func(old, in *fpState) (changed bool) {
		for k := range in {
			v := joinFP(old[k], in[k])
			changed = changed || v != old[k]
			old[k] = v
		}
		return changed
	})
}

// forward is a forward data-flow analysis over sp's branches: for each
// instruction, the state every path to it agrees on (nil where no path
// reaches it). step applies an instruction to a state; join merges a path's
// state into the one an instruction has, saying whether it changed.
func forward[S any](c *compiler, sp *subprog, entry S, step func(*asm.Instruction, *S), join func(old, in *S) bool) []*S {
	n := sp.end - sp.start
	in := make([]*S, n)
	in[0] = &entry
	work := []int{sp.start}
	queued := map[int]bool{sp.start: true}
	merge := func(j int, st *S) {
		if j < sp.start || j >= sp.end {
			return
		}
		changed := true
		if old := in[j-sp.start]; old == nil {
			s := *st
			in[j-sp.start] = &s
		} else {
			changed = join(old, st)
		}
		if changed && !queued[j] {
			queued[j] = true
			work = append(work, j)
		}
	}
	for len(work) > 0 {
		i := work[len(work)-1]
		work = work[:len(work)-1]
		queued[i] = false
		st := *in[i-sp.start]
		ins := &c.insns[i]
		op := ins.OpCode
		step(ins, &st)
		if op.Class().IsJump() && op.JumpOp() != asm.Call {
			switch op.JumpOp() {
			case asm.Exit:
				continue
			case asm.Ja:
				merge(c.target[i], &st)
				continue
			default:
				merge(c.target[i], &st)
			}
		}
		merge(i+1, &st)
	}
	return in
}

// fpStep applies ins to st.
func fpStep(ins *asm.Instruction, st *fpState) {
	op := ins.OpCode
	cls := op.Class()
	get := func(r asm.Register) fpVal {
		if r > asm.R10 {
			return fpVal{}
		}
		return st[r]
	}
	switch {
	case cls.IsALU():
		if ins.Dst >= asm.R10 {
			return
		}
		d, a := get(ins.Dst), op.ALUOp()
		regSrc := op.Source() == asm.RegSource
		s := fpVal{}
		if regSrc {
			s = get(ins.Src)
		}
		switch {
		case cls == asm.ALU64Class && a == asm.Mov && !regSrc:
			st[ins.Dst] = fpVal{kind: fpConst, off: ins.Constant}
		case cls == asm.ALU64Class && a == asm.Mov:
			st[ins.Dst] = s
		case cls == asm.ALUClass && a == asm.Mov && !regSrc:
			st[ins.Dst] = fpVal{kind: fpConst, off: int64(uint32(ins.Constant))}
		case cls == asm.ALU64Class && (a == asm.Add || a == asm.Sub) && !regSrc && (d.kind == fpExact || d.kind == fpConst):
			k := ins.Constant
			if a == asm.Sub {
				k = -k
			}
			st[ins.Dst] = fpVal{kind: d.kind, off: d.off + k}
		case d.mayBeFP() || s.mayBeFP():
			// Anything else made of a stack pointer may still point
			// into the stack, at an offset not known.
			st[ins.Dst] = fpVal{kind: fpUnknown}
		default:
			st[ins.Dst] = fpVal{}
		}
	case cls == asm.LdClass && ins.Src == 0 && ins.Dst < asm.R10:
		st[ins.Dst] = fpVal{kind: fpConst, off: ins.Constant}
	case cls == asm.LdClass || cls == asm.LdXClass:
		if ins.Dst < asm.R10 {
			st[ins.Dst] = fpVal{} // a pointer stored to memory is an escape (stackUse)
		}
	case cls == asm.StXClass && op.Mode() == asm.AtomicMode:
		switch aop := op.AtomicOp(); {
		case aop == asm.AtomicOp(0x0001_0000): // load-acquire: dst = *(src + off)
			if ins.Dst < asm.R10 {
				st[ins.Dst] = fpVal{}
			}
		case aop == asm.AtomicOp(0x0001_1000): // store-release
		default:
			// fetch variants write src, cmpxchg r0: values from memory
			if aop&0x100 != 0 && ins.Src < asm.R10 {
				st[ins.Src] = fpVal{}
			}
			if aop&^0x100 == 0xf0 {
				st[0] = fpVal{}
			}
		}
	case cls.IsJump() && op.JumpOp() == asm.Call:
		for r := 0; r <= 5; r++ {
			st[r] = fpVal{}
		}
	}
}

// stackDirectArgs: the argument registers (bit r) of a helper that its
// code reaches only with constant-offset stack accesses when they hold
// r10 + a known offset (the emitter's ptr): the thread and block index
// out-parameters. The key of a map lookup, update or delete is one too
// when the map is an array (stackUse checks the map).
var stackDirectArgs = map[int64]uint16{
	hBlockIdx: 0xe, hBlockDim: 0xe, hThreadIdx: 0xe, hGridDim: 0xe,
}

// stackSizeArgs: for a helper's pointer argument (key), the argument that
// holds the size of the memory it reads or writes through it; the slots
// of [pointer, pointer + size) stay in memory when that size is a known
// number, the slots up to the top of the stack otherwise. (Map keys and
// values have their map's sizes: stackUse.)
var stackSizeArgs = map[int64]map[asm.Register]asm.Register{
	hProbeRead: {asm.R1: asm.R2, asm.R3: asm.R2}, hProbeReadUser: {asm.R1: asm.R2, asm.R3: asm.R2},
	hProbeReadKern: {asm.R1: asm.R2, asm.R3: asm.R2}, hProbeReadStr: {asm.R1: asm.R2, asm.R3: asm.R2},
	hProbeUserStr: {asm.R1: asm.R2, asm.R3: asm.R2}, hProbeKernStr: {asm.R1: asm.R2, asm.R3: asm.R2},
	hPerfOutput: {asm.R4: asm.R5}, hRingOutput: {asm.R2: asm.R3}, hTracePrintk: {asm.R1: asm.R2},
}

// stackUse records, before ins is emitted, which stack slots its use of
// stack pointers forces into memory. st is the analysis' state before it; the emitter's own tracking (c.fpOK, c.fp) says whether
// its access will have the constant-offset form.
func (c *compiler) stackUse(ins *asm.Instruction, st *fpState, known *[11]int) {
	if st == nil {
		return
	}
	op := ins.OpCode
	cls := op.Class()
	direct := func(r asm.Register) bool { return r == asm.R10 || (r < asm.R10 && c.fpOK[r]) }
	var inlined asm.Register // the data pointer of an inlined event output
	if cls.IsJump() && op.JumpOp() == asm.Call && !ins.IsFunctionCall() {
		inlined = c.inlineOutput(int64(ins.Constant), st, direct)
		if r := c.inlineRead(int64(ins.Constant), st, direct); r != 0 {
			inlined = r
		}
	}
	if c.stackAll {
		return
	}
	// escape: the size bytes from r (to the top of the stack where size
	// is not known: 0) stay in memory, where r's offset is known; every
	// slot otherwise.
	escape := func(r asm.Register, size int64) {
		v := st[r]
		if v.kind != fpExact || !direct(r) {
			c.stackAll = true
			return
		}
		if size <= 0 || size > StackSize {
			size = -int64(c.fp[r])
		}
		c.stackRange(c.fp[r], size)
	}
	from := func(r asm.Register) { escape(r, 0) }
	base := func(r asm.Register) {
		if r <= asm.R10 && st[r].mayBeFP() && !direct(r) {
			c.stackAll = true // a generic access that may hit the stack
		}
	}
	switch {
	case cls == asm.LdXClass:
		base(ins.Src)
	case cls == asm.StClass:
		base(ins.Dst)
	case cls == asm.StXClass:
		if op.Mode() == asm.AtomicMode {
			if ins.Dst <= asm.R10 && st[ins.Dst].mayBeFP() {
				from(ins.Dst) // atomics reach the stack through a generic address
			}
		} else {
			base(ins.Dst)
		}
		if ins.Src <= asm.R10 && st[ins.Src].mayBeFP() {
			c.stackAll = true // a stack pointer stored to memory
		}
	case cls.IsJump() && op.JumpOp() == asm.Call && ins.IsFunctionCall():
		// A subprogram may reach the caller's stack anywhere from a
		// pointer it is given, below the pointer too.
		for r := asm.R1; r <= asm.R5; r++ {
			if st[r].mayBeFP() {
				c.stackAll = true
			}
		}
	case cls.IsJump() && op.JumpOp() == asm.Call:
		id := int64(ins.Constant)
		ok := stackDirectArgs[id]
		var sizes [asm.R5 + 1]int64 // 0: not known
		for r, n := range stackSizeArgs[id] {
			if v := st[n]; v.kind == fpConst {
				sizes[r] = v.off
			}
		}
		if id == hMapLookup || id == hMapUpdate || id == hMapDelete {
			if m := known[asm.R1]; m >= 0 {
				p := c.maps[m].p
				if isArrayLike(p.Kind) {
					ok |= 1 << 2
				}
				sizes[asm.R2], sizes[asm.R3] = int64(p.KeySize), int64(p.ValueSize)
			}
		}
		for r := asm.R1; r <= asm.R5; r++ {
			if !st[r].mayBeFP() || r == inlined {
				continue
			}
			if ok&(1<<r) != 0 && st[r].kind == fpExact && direct(r) {
				continue
			}
			escape(r, sizes[r])
		}
	}
}

// maxInlineOutput: event records up to this many bytes are copied from the
// stack by code at the call (one load and store per 8 bytes) instead of
// the runtime's memcpy.
const maxInlineOutput = 256

// inlineOutput decides whether the event output helper id about to be
// emitted copies its record from the stack itself: a record at a known,
// 8-byte aligned stack offset with a size known here. Then the record's
// slots are read only by constant-offset loads after the reservation, so
// they stay in registers, and a record the full ring drops costs no stack
// traffic at all (before, every thread stored its record to local memory
// for the runtime's memcpy: at a 16M-thread launch, mostly to drop it).
// It returns the data pointer's register where it does (0 where not).
func (c *compiler) inlineOutput(id int64, st *fpState, direct func(asm.Register) bool) asm.Register {
	data, size := asm.R4, asm.R5
	switch id {
	case hPerfOutput:
	case hRingOutput:
		data, size = asm.R2, asm.R3
	default:
		return 0
	}
	n := st[size]
	if st[data].kind != fpExact || !direct(data) || n.kind != fpConst || n.off <= 0 || n.off > maxInlineOutput {
		return 0
	}
	off := StackSize + c.fp[data]
	if off < 0 || off%8 != 0 || off+int(n.off) > StackSize {
		return 0
	}
	c.outAt, c.outOff, c.outLen = c.cur, off, int(n.off)
	return data
}

// inlineRead decides whether the probe_read call id about to be emitted
// loads its bytes itself: 1, 2, 4 or 8 bytes (a number known here) to a
// known stack offset aligned to that size. Then the destination is written
// by one constant-offset store, so its slot may stay in a register, and
// the function may need no local frame at all (bcc-style programs read a
// field at a time: bpf_probe_read(&x, sizeof(x), p)). It returns the
// destination's register where it does (0 where not).
func (c *compiler) inlineRead(id int64, st *fpState, direct func(asm.Register) bool) asm.Register {
	if id != hProbeRead && id != hProbeReadUser && id != hProbeReadKern {
		return 0
	}
	n := st[asm.R2]
	if st[asm.R1].kind != fpExact || !direct(asm.R1) || n.kind != fpConst || (n.off != 1 && n.off != 2 && n.off != 4 && n.off != 8) {
		return 0
	}
	off := StackSize + c.fp[asm.R1]
	if off < 0 || off%int(n.off) != 0 || off+int(n.off) > StackSize {
		return 0
	}
	c.readAt, c.readOff, c.readLen = c.cur, off, int(n.off)
	return asm.R1
}

// stackRange puts the slots of the size bytes at r10 + off in memory.
func (c *compiler) stackRange(off int, size int64) {
	lo, hi := int64(StackSize+off), int64(StackSize+off)+size
	lo, hi = max(lo, 0), min(hi, StackSize)
	for k := lo / 8; k < stackSlots && k*8 < hi; k++ {
		c.stackMem[k] = true
	}
}

var stackRef = regexp.MustCompile(`\[stk\+(\d+)\]`)

// trimFrame sizes the function's local frame to the stack bytes that stay
// in memory after promoteStack: from the lowest one any access reaches
// (a constant-offset access left in text, or a slot a pointer escapes to)
// to the top. It returns text with its accesses rebased and the frame's
// size, 0 where nothing stays in memory. A declared frame is local memory
// reserved for every thread the GPU can hold, and ptxas keeps an array
// whose address is taken even where no instruction touches it: before,
// every probe site carried all 512 bytes (kernelretsnoop's three exit
// sites 1.5 KB a thread) for a map key or two that lived in registers.
func (c *compiler) trimFrame(text string) (string, int) {
	if c.stackAll {
		return text, StackSize
	}
	low := StackSize
	for k, m := range c.stackMem {
		if m {
			low = min(low, 8*k)
			break
		}
	}
	for _, m := range stackRef.FindAllStringSubmatch(text, -1) {
		off, _ := strconv.Atoi(m[1])
		low = min(low, off)
	}
	low &^= 15 // the frame keeps its 16-byte alignment
	if low == 0 {
		return text, StackSize
	}
	text = stackRef.ReplaceAllStringFunc(text, func(ref string) string {
		off, _ := strconv.Atoi(ref[len("[stk+") : len(ref)-1]) // the match is [stk+N]
		return fmt.Sprintf("[stk+%d]", off-low)
	})
	return text, StackSize - low
}

var (
	stackLd = regexp.MustCompile(`^\tld\.local\.([us])(8|16|32|64) (%[rtw]\d+), \[stk\+(\d+)\];$`)
	stackSt = regexp.MustCompile(`^\tst\.local\.u(8|16|32|64) \[stk\+(\d+)\], (%[rtw]\d+);$`)
)

// stackAccess is one constant-offset stack access of the emitted body.
type stackAccess struct {
	load   bool
	signed bool
	bits   int
	off    int
	reg    string
}

func parseStackAccess(line string) (stackAccess, bool) {
	if m := stackLd.FindStringSubmatch(line); m != nil {
		bits, _ := strconv.Atoi(m[2])
		off, _ := strconv.Atoi(m[4])
		return stackAccess{load: true, signed: m[1] == "s", bits: bits, off: off, reg: m[3]}, true
	}
	if m := stackSt.FindStringSubmatch(line); m != nil {
		bits, _ := strconv.Atoi(m[1])
		off, _ := strconv.Atoi(m[2])
		return stackAccess{bits: bits, off: off, reg: m[3]}, true
	}
	return stackAccess{}, false
}

// promoteStack rewrites the body's accesses to stack slots that may live
// in registers (%gsK, slot K = bytes 8K to 8K+7 of stk) and returns the
// new body and the slots it uses. mem: slots that must stay in memory.
func promoteStack(body string, mem *[stackSlots]bool) (string, []int) {
	lines := strings.Split(body, "\n")
	keep := *mem
	type access struct {
		line int
		stackAccess
	}
	var accs []access
	for n, l := range lines {
		if !strings.Contains(l, "[stk+") {
			continue
		}
		a, ok := parseStackAccess(l)
		if !ok {
			return body, nil // a form this pass does not know: all in memory
		}
		switch {
		case a.off+a.bits/8 > StackSize:
			return body, nil
		case a.off%8*8+a.bits > 64, a.bits == 64 && a.reg[1] == 'w':
			// across two slots, or a 64-bit access of a 32-bit register
			keep[a.off/8] = true
			keep[(a.off+a.bits/8-1)/8] = true
			continue
		}
		accs = append(accs, access{n, a})
	}
	var used [stackSlots]bool
	for _, x := range accs {
		n, a := x.line, x.stackAccess
		k, b := a.off/8, a.off%8
		if keep[k] {
			continue
		}
		used[k] = true
		s := fmt.Sprintf("%%gs%d", k)
		w := a.reg[1] == 'w'
		switch {
		case a.load && a.bits == 64:
			lines[n] = fmt.Sprintf("\tmov.b64 %s, %s;", a.reg, s)
		case a.load:
			sign := "u"
			if a.signed {
				sign = "s"
			}
			if w {
				lines[n] = fmt.Sprintf("\tbfe.%s64 %%gsx, %s, %d, %d;\n\tcvt.u32.u64 %s, %%gsx;", sign, s, b*8, a.bits, a.reg)
			} else {
				lines[n] = fmt.Sprintf("\tbfe.%s64 %s, %s, %d, %d;", sign, a.reg, s, b*8, a.bits)
			}
		case a.bits == 64:
			lines[n] = fmt.Sprintf("\tmov.b64 %s, %s;", s, a.reg)
		case w:
			lines[n] = fmt.Sprintf("\tcvt.u64.u32 %%gsx, %s;\n\tbfi.b64 %s, %%gsx, %s, %d, %d;", a.reg, s, s, b*8, a.bits)
		default:
			lines[n] = fmt.Sprintf("\tbfi.b64 %s, %s, %s, %d, %d;", s, a.reg, s, b*8, a.bits)
		}
	}
	var slots []int
	for k, u := range used {
		if u {
			slots = append(slots, k)
		}
	}
	if len(slots) == 0 {
		return body, nil
	}
	return strings.Join(lines, "\n"), slots
}
