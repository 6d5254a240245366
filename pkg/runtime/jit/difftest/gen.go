// Package difftest generates random and structured eBPF programs for the
// differential test of the eBPF -> PTX compiler: every program runs in the
// Linux kernel (BPF_PROG_TEST_RUN) and on the GPU, and the map contents and
// return values must be identical.
//
// A program reads nothing from outside: registers start from edge values,
// the stack is initialised, and results land in three maps:
//
//	res  array, 1 entry of ResSize bytes: r0-r9 at exit (slots 0-9) and
//	     slots 10-15 for stores and atomics
//	data array, DataEntries entries of 8 bytes (lookups/updates, keys up to 7
//	     so some are out of range)
//	h    hash, HashMax entries, u64 -> u64 (update/lookup/delete, keys 0-15)
package difftest

import (
	"math/rand"

	"github.com/cilium/ebpf/asm"
)

const (
	ResSize     = 128
	DataEntries = 4
	HashMax     = 8
	HashKeys    = 16
)

var edge = []int64{0, 1, -1, 2, 7, -7, 31, 32, 63, 64, 0x7f, 0x80, 0xff, 0x7fff, 0x8000, 0xffff,
	0x7fffffff, -0x80000000, 0x80000000, 0xffffffff, 0x100000000, -0x8000000000000000, 0x7fffffffffffffff,
	0x0123456789abcdef, -0x0123456789abcdef, 0x5555555555555555, 0xaaaa}

// work registers: everything but r6 (the res pointer) and r10.
var work = []asm.Register{asm.R0, asm.R1, asm.R2, asm.R3, asm.R4, asm.R5, asm.R7, asm.R8, asm.R9}

type gen struct {
	r     *rand.Rand
	out   asm.Instructions
	calls int
	sub   bool
}

// DataInit is the initial value of data[k] for a seed.
func DataInit(seed int64, k int) uint64 {
	return uint64(seed)*0x9E3779B97F4A7C15 + uint64(k)*0x1234567 + 1
}

// Program generates program number seed. Programs with seed%10 == 9 are
// structured (loops, subprogram calls, helper-heavy); the rest random mixes.
func Program(seed int64) asm.Instructions {
	g := &gen{r: rand.New(rand.NewSource(seed))}
	g.out = append(g.out, asm.LoadMapValue(asm.R6, 0, 0).WithReference("res"))
	for _, r := range work {
		g.out = append(g.out, asm.LoadImm(r, g.val(), asm.DWord))
	}
	for off := int16(-8); off >= -96; off -= 8 {
		g.out = append(g.out, asm.Instruction{OpCode: asm.StoreImmOp(asm.DWord), Dst: asm.RFP, Offset: off, Constant: int64(int32(g.val()))})
	}
	n := 20 + g.r.Intn(60)
	structured := seed%10 == 9
	for i := 0; i < n; i++ {
		g.step(structured)
	}
	for _, r := range work {
		g.out = append(g.out, asm.StoreMem(asm.R6, int16(8*r), r, asm.DWord))
	}
	g.out = append(g.out, asm.Return())
	if g.sub {
		// The subprogram: mixes its five arguments into r0.
		f := asm.Instructions{
			asm.Mov.Reg(asm.R0, asm.R1).WithSymbol("sub"),
			asm.Xor.Reg(asm.R0, asm.R2),
			asm.Mul.Reg(asm.R0, asm.R3),
			asm.StoreMem(asm.RFP, -8, asm.R4, asm.DWord),
			asm.LoadMem(asm.R4, asm.RFP, -8, asm.Word),
			asm.Add.Reg(asm.R0, asm.R4),
			asm.SDiv.Reg(asm.R0, asm.R5),
			asm.Return(),
		}
		g.out = append(g.out, f...)
	}
	return g.out
}

func (g *gen) val() int64 {
	if g.r.Intn(3) == 0 {
		return int64(g.r.Uint64())
	}
	return edge[g.r.Intn(len(edge))]
}

func (g *gen) reg() asm.Register { return work[g.r.Intn(len(work))] }

// regNot picks a work register other than those given.
func (g *gen) regNot(not ...asm.Register) asm.Register {
	for {
		r := g.reg()
		ok := true
		for _, n := range not {
			if r == n {
				ok = false
			}
		}
		if ok {
			return r
		}
	}
}

var aluOps = []asm.ALUOp{asm.Add, asm.Sub, asm.Mul, asm.Div, asm.SDiv, asm.Or, asm.And, asm.LSh, asm.RSh, asm.Mod, asm.SMod, asm.Xor, asm.Mov, asm.ArSh}

var sizes = []asm.Size{asm.Byte, asm.Half, asm.Word, asm.DWord}

// simple returns one single-slot instruction that writes no register in
// avoid (for loop bodies and branch blocks).
func (g *gen) simple(avoid ...asm.Register) asm.Instruction {
	d := g.regNot(avoid...)
	s := g.reg()
	switch k := g.r.Intn(20); {
	case k < 12:
		op := aluOps[g.r.Intn(len(aluOps))]
		is32 := g.r.Intn(2) == 0
		if g.r.Intn(2) == 0 {
			if is32 {
				return op.Reg32(d, s)
			}
			return op.Reg(d, s)
		}
		imm := int32(g.val())
		switch op {
		case asm.LSh, asm.RSh, asm.ArSh:
			if is32 {
				imm &= 31
			} else {
				imm &= 63
			}
		case asm.Div, asm.SDiv, asm.Mod, asm.SMod:
			if imm == 0 {
				imm = -1
			}
		}
		if is32 {
			return op.Imm32(d, imm)
		}
		return op.Imm(d, imm)
	case k == 12:
		if g.r.Intn(2) == 0 {
			return asm.Neg.Imm(d, 0)
		}
		return asm.Neg.Imm32(d, 0)
	case k == 13:
		sz := []asm.Size{asm.Half, asm.Word, asm.DWord}[g.r.Intn(3)]
		switch g.r.Intn(3) {
		case 0:
			return asm.HostTo(asm.LE, d, sz)
		case 1:
			return asm.HostTo(asm.BE, d, sz)
		}
		return asm.BSwap(d, sz)
	case k == 14:
		ops := []asm.ALUOp{asm.MovSX8, asm.MovSX16, asm.MovSX32}
		op := ops[g.r.Intn(3)]
		if op != asm.MovSX32 && g.r.Intn(2) == 0 {
			return op.Reg32(d, s)
		}
		return op.Reg(d, s)
	case k == 15:
		sz := sizes[g.r.Intn(4)]
		return asm.StoreMem(asm.RFP, g.stackOff(sz), s, sz)
	case k == 16:
		sz := sizes[g.r.Intn(4)]
		if sz != asm.DWord && g.r.Intn(2) == 0 {
			return asm.LoadMemSX(d, asm.RFP, g.stackOff(sz), sz)
		}
		return asm.LoadMem(d, asm.RFP, g.stackOff(sz), sz)
	case k == 17:
		sz := sizes[g.r.Intn(4)]
		return asm.StoreMem(asm.R6, g.resOff(sz), s, sz)
	case k == 18:
		sz := sizes[g.r.Intn(4)]
		return asm.LoadMem(d, asm.R6, g.resOff(sz), sz)
	default:
		return asm.Instruction{OpCode: asm.StoreImmOp(sizes[g.r.Intn(4)]), Dst: asm.RFP, Offset: g.stackOff(asm.Byte) &^ 7, Constant: int64(int32(g.val()))}
	}
}

func (g *gen) stackOff(sz asm.Size) int16 {
	n := int16(sz.Sizeof())
	// Aligned offsets in [-96, -n].
	return -int16(g.r.Intn(96/int(n)))*n - n
}

func (g *gen) resOff(sz asm.Size) int16 {
	n := int16(sz.Sizeof())
	return 80 + int16(g.r.Intn(48/int(n)))*n
}

func (g *gen) atomic() {
	ops := []asm.AtomicOp{asm.AddAtomic, asm.FetchAdd, asm.OrAtomic, asm.FetchOr, asm.AndAtomic, asm.FetchAnd, asm.XorAtomic, asm.FetchXor, asm.Xchg, asm.CmpXchg}
	op := ops[g.r.Intn(len(ops))]
	sz := asm.DWord
	if g.r.Intn(2) == 0 {
		sz = asm.Word
	}
	s := g.reg()
	var ins asm.Instruction
	if g.r.Intn(3) == 0 {
		ins = op.Mem(asm.RFP, s, sz, g.stackOff(sz))
	} else {
		ins = op.Mem(asm.R6, s, sz, g.resOff(sz))
	}
	g.out = append(g.out, atomicImm(ins))
}

// atomicImm puts the atomic operation into the immediate, where the kernel
// reads it: cilium/ebpf v0.22's Instruction.Marshal computes the immediate
// before it encodes the operation, so an asm-built atomic would otherwise
// reach the kernel as a plain atomic add (imm 0).
func atomicImm(ins asm.Instruction) asm.Instruction {
	ins.Constant = int64(uint32(ins.OpCode.AtomicOp()) >> 8)
	return ins
}

var jumpOps = []asm.JumpOp{asm.JEq, asm.JGT, asm.JGE, asm.JSet, asm.JNE, asm.JSGT, asm.JSGE, asm.JLT, asm.JLE, asm.JSLT, asm.JSLE}

func (g *gen) branch() {
	k := 1 + g.r.Intn(4)
	block := make([]asm.Instruction, k)
	for i := range block {
		block[i] = g.simple()
	}
	op := jumpOps[g.r.Intn(len(jumpOps))]
	var j asm.Instruction
	a, b := g.reg(), g.reg()
	switch g.r.Intn(5) {
	case 0:
		j = op.Reg(a, b, "")
	case 1:
		j = op.Imm(a, int32(g.val()), "")
	case 2:
		j = op.Reg32(a, b, "")
	case 3:
		j = op.Imm32(a, int32(g.val()), "")
	default:
		// gotol (the 32-bit-offset unconditional jump) behind a condition
		// that can skip it, so the block stays reachable for the verifier.
		g.out = append(g.out, jOff(op.Reg(a, b, ""), 1))
		j = asm.Instruction{OpCode: asm.OpCode(asm.Jump32Class).SetJumpOp(asm.Ja), Constant: int64(k)}
	}
	j.Offset = int16(k)
	j = j.WithReference("")
	if j.OpCode.Class() == asm.Jump32Class && j.OpCode.JumpOp() == asm.Ja {
		j.Offset = 0
	}
	g.out = append(g.out, j)
	g.out = append(g.out, block...)
}

func (g *gen) loop() {
	n := 1 + g.r.Intn(5)
	body := make([]asm.Instruction, 1+g.r.Intn(3))
	for i := range body {
		body[i] = g.simple(asm.R9)
	}
	g.out = append(g.out, asm.Mov.Imm(asm.R9, int32(n)))
	g.out = append(g.out, body...)
	g.out = append(g.out, asm.Sub.Imm(asm.R9, 1))
	j := asm.JNE.Imm(asm.R9, 0, "")
	j.Offset = -int16(len(body) + 2)
	g.out = append(g.out, j)
}

// reinit gives r1-r5 fresh values after a call clobbered them.
func (g *gen) reinit() {
	for r := asm.R1; r <= asm.R5; r++ {
		g.out = append(g.out, asm.LoadImm(r, g.val(), asm.DWord))
	}
}

func (g *gen) helper() {
	if g.calls >= 3 {
		g.out = append(g.out, g.simple())
		return
	}
	g.calls++
	key := g.reg()
	switch g.r.Intn(6) {
	case 0, 1: // data lookup: value or a marker, never the pointer
		g.out = append(g.out,
			asm.Mov.Reg(asm.R1, key), asm.And.Imm(asm.R1, 7), asm.StoreMem(asm.RFP, -104, asm.R1, asm.Word),
			asm.LoadMapPtr(asm.R1, 0).WithReference("data"),
			asm.Mov.Reg(asm.R2, asm.RFP), asm.Add.Imm(asm.R2, -104),
			asm.FnMapLookupElem.Call(),
			jOff(asm.JEq.Imm(asm.R0, 0, ""), 3),
			asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord),
			atomicImm(asm.FetchAdd.Mem(asm.R0, asm.R1, asm.DWord, 0)),
			jOff(asm.Ja.Label(""), 1),
			asm.Mov.Imm(asm.R1, 7777),
			asm.Mov.Reg(asm.R0, asm.R1),
		)
	case 2: // data update with flags 0-3 (3 is invalid)
		g.out = append(g.out,
			asm.Mov.Reg(asm.R1, key), asm.And.Imm(asm.R1, 7), asm.StoreMem(asm.RFP, -104, asm.R1, asm.Word),
			asm.StoreMem(asm.RFP, -112, g.reg(), asm.DWord),
			asm.LoadMapPtr(asm.R1, 0).WithReference("data"),
			asm.Mov.Reg(asm.R2, asm.RFP), asm.Add.Imm(asm.R2, -104),
			asm.Mov.Reg(asm.R3, asm.RFP), asm.Add.Imm(asm.R3, -112),
			asm.Mov.Imm(asm.R4, int32(g.r.Intn(4))),
			asm.FnMapUpdateElem.Call(),
		)
	case 3: // hash update
		g.out = append(g.out,
			asm.Mov.Reg(asm.R1, key), asm.And.Imm(asm.R1, HashKeys-1), asm.StoreMem(asm.RFP, -104, asm.R1, asm.DWord),
			asm.StoreMem(asm.RFP, -112, g.reg(), asm.DWord),
			asm.LoadMapPtr(asm.R1, 0).WithReference("h"),
			asm.Mov.Reg(asm.R2, asm.RFP), asm.Add.Imm(asm.R2, -104),
			asm.Mov.Reg(asm.R3, asm.RFP), asm.Add.Imm(asm.R3, -112),
			asm.Mov.Imm(asm.R4, int32(g.r.Intn(3))),
			asm.FnMapUpdateElem.Call(),
		)
	case 4: // hash lookup
		g.out = append(g.out,
			asm.Mov.Reg(asm.R1, key), asm.And.Imm(asm.R1, HashKeys-1), asm.StoreMem(asm.RFP, -104, asm.R1, asm.DWord),
			asm.LoadMapPtr(asm.R1, 0).WithReference("h"),
			asm.Mov.Reg(asm.R2, asm.RFP), asm.Add.Imm(asm.R2, -104),
			asm.FnMapLookupElem.Call(),
			jOff(asm.JEq.Imm(asm.R0, 0, ""), 3),
			asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord),
			asm.Xor.Imm(asm.R1, 0x55),
			jOff(asm.Ja.Label(""), 1),
			asm.Mov.Imm(asm.R1, 8888),
			asm.Mov.Reg(asm.R0, asm.R1),
		)
	default: // hash delete, or a bpf-to-bpf call
		if g.r.Intn(2) == 0 {
			g.out = append(g.out,
				asm.Mov.Reg(asm.R1, key), asm.And.Imm(asm.R1, HashKeys-1), asm.StoreMem(asm.RFP, -104, asm.R1, asm.DWord),
				asm.LoadMapPtr(asm.R1, 0).WithReference("h"),
				asm.Mov.Reg(asm.R2, asm.RFP), asm.Add.Imm(asm.R2, -104),
				asm.FnMapDeleteElem.Call(),
			)
		} else {
			g.sub = true
			g.out = append(g.out, asm.Call.Label("sub"))
		}
	}
	g.reinit()
}

func jOff(j asm.Instruction, off int16) asm.Instruction {
	j.Offset = off
	return j.WithReference("")
}

func (g *gen) step(structured bool) {
	k := g.r.Intn(100)
	if structured {
		switch {
		case k < 25:
			g.loop()
		case k < 55:
			g.helper()
		case k < 70:
			g.atomic()
		case k < 85:
			g.branch()
		default:
			g.out = append(g.out, g.simple())
		}
		return
	}
	switch {
	case k < 60:
		g.out = append(g.out, g.simple())
	case k < 75:
		g.branch()
	case k < 85:
		g.atomic()
	case k < 90:
		g.loop()
	default:
		g.helper()
	}
}
