package jit

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/gpubpf/gpubpf/internal/testenv"
	"github.com/gpubpf/gpubpf/pkg/runtime/gpumap"
)

// testMaps are placements with placeholder addresses for every map kind.
var testMaps = map[string]gpumap.Placement{
	"arr":  {Kind: gpumap.Array, Addr: 0x7f0000000000, KeySize: 4, ValueSize: 16, MaxEntries: 4},
	"pta":  {Kind: gpumap.PerThreadArray, Addr: 0x7f0000100000, KeySize: 4, ValueSize: 8, MaxEntries: 2, Threads: 1024},
	"hash": {Kind: gpumap.Hash, Addr: 0x7f0000200000, KeySize: 8, ValueSize: 8, MaxEntries: 64},
	"ring": {Kind: gpumap.RingBuf, Addr: 0x7f0000300000, HostResident: true, MaxEntries: 1 << 16},
	"host": {Kind: gpumap.HostArray, Addr: 0x7f0000400000, HostResident: true, KeySize: 4, ValueSize: 8, MaxEntries: 8},
	// bpftime's host-backed arrays (1513, 1512): device layouts in host memory.
	"harr": {Kind: gpumap.Array, Addr: 0x7f0000600000, HostResident: true, KeySize: 4, ValueSize: 8, MaxEntries: 4},
	"hpta": {Kind: gpumap.PerThreadArray, Addr: 0x7f0000700000, HostResident: true, KeySize: 4, ValueSize: 8, MaxEntries: 3, Threads: 1024},
}

var testPrintk = gpumap.Placement{Kind: gpumap.RingBuf, Addr: 0x7f0000500000, HostResident: true, MaxEntries: 1 << 16}

func testOpts() Options {
	return Options{Maps: testMaps, Printk: testPrintk, PID: 1234, FuncName: "probe"}
}

func prog(insns ...asm.Instruction) *ebpf.ProgramSpec {
	return &ebpf.ProgramSpec{Name: "t", Type: ebpf.Kprobe, Instructions: insns}
}

// assemble runs ptxas on f's test module and fails the test on any error.
func assemble(t testing.TB, f *Function) {
	t.Helper()
	ptxas := testenv.Ptxas(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "m.ptx")
	if err := os.WriteFile(src, []byte(TestModule(f, "sm_90")), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(ptxas, "-arch=sm_90", src, "-o", filepath.Join(dir, "m.cubin")).CombinedOutput()
	if err != nil {
		t.Fatalf("ptxas: %v\n%s\n--- module ---\n%s", err, out, numbered(TestModule(f, "sm_90")))
	}
}

func numbered(s string) string {
	var b strings.Builder
	for i, l := range strings.Split(s, "\n") {
		fmt.Fprintf(&b, "%4d %s\n", i+1, l)
	}
	return b.String()
}

func ret0(insns ...asm.Instruction) []asm.Instruction {
	return append(insns, asm.Mov.Imm(asm.R0, 0), asm.Return())
}

// setup puts edge values in r0-r9.
func setup() []asm.Instruction {
	vals := []int64{0, -1, 1 << 31, 0x7fffffff, -0x8000000000000000, 0x7fffffffffffffff, 3, -7, 0x123456789abcdef, 64}
	var out []asm.Instruction
	for r, v := range vals {
		out = append(out, asm.LoadImm(asm.Register(r), v, asm.DWord))
	}
	return out
}

func aluCases() map[string][]asm.Instruction {
	cases := map[string][]asm.Instruction{}
	ops := []asm.ALUOp{asm.Add, asm.Sub, asm.Mul, asm.Div, asm.SDiv, asm.Or, asm.And, asm.LSh, asm.RSh, asm.Mod, asm.SMod, asm.Xor, asm.Mov, asm.ArSh}
	for _, op := range ops {
		var is []asm.Instruction
		is = append(is, setup()...)
		for _, imm := range []int32{1, -1, 7, 63, 31, 0x7fffffff, -0x80000000} {
			if (op == asm.LSh || op == asm.RSh || op == asm.ArSh) && (imm < 0 || imm > 31) {
				continue
			}
			is = append(is, op.Imm(asm.R3, imm), op.Imm32(asm.R4, imm))
		}
		for s := asm.R0; s <= asm.R9; s++ {
			is = append(is, op.Reg(asm.R5, s), op.Reg32(asm.R6, s))
		}
		cases["alu/"+op.String()] = append(is, asm.Mov.Reg(asm.R0, asm.R5), asm.Return())
	}
	var is []asm.Instruction
	is = append(is, setup()...)
	is = append(is, asm.Neg.Imm(asm.R3, 0), asm.Neg.Imm32(asm.R4, 0))
	for _, sx := range []asm.ALUOp{asm.MovSX8, asm.MovSX16, asm.MovSX32} {
		is = append(is, sx.Reg(asm.R5, asm.R8))
		if sx != asm.MovSX32 {
			is = append(is, sx.Reg32(asm.R6, asm.R8))
		}
	}
	for _, sz := range []asm.Size{asm.Half, asm.Word, asm.DWord} {
		is = append(is, asm.HostTo(asm.LE, asm.R7, sz), asm.HostTo(asm.BE, asm.R8, sz), asm.BSwap(asm.R9, sz))
	}
	cases["alu/neg-movsx-swap"] = append(is, asm.Mov.Reg(asm.R0, asm.R9), asm.Return())
	return cases
}

func memCases() map[string][]asm.Instruction {
	cases := map[string][]asm.Instruction{}
	var is []asm.Instruction
	is = append(is, setup()...)
	for _, sz := range []asm.Size{asm.Byte, asm.Half, asm.Word, asm.DWord} {
		is = append(is,
			asm.StoreMem(asm.RFP, -16, asm.R5, sz),
			stImm(asm.RFP, -24, -2, sz),
			asm.LoadMem(asm.R3, asm.RFP, -16, sz),
		)
		if sz != asm.DWord {
			is = append(is, asm.LoadMemSX(asm.R4, asm.RFP, -24, sz))
		}
		// Through a derived (generic) stack pointer too.
		is = append(is, asm.Mov.Reg(asm.R2, asm.RFP), asm.Add.Imm(asm.R2, -32),
			asm.StoreMem(asm.R2, 0, asm.R5, sz), asm.LoadMem(asm.R6, asm.R2, 0, sz))
	}
	cases["mem/stack"] = append(is, asm.Mov.Reg(asm.R0, asm.R6), asm.Return())
	// Atomics on the stack and on map values, all ops, both sizes.
	atom := []asm.AtomicOp{asm.AddAtomic, asm.FetchAdd, asm.OrAtomic, asm.FetchOr, asm.AndAtomic, asm.FetchAnd, asm.XorAtomic, asm.FetchXor, asm.Xchg, asm.CmpXchg}
	for _, where := range []string{"stack", "arr", "host", "harr"} {
		var is []asm.Instruction
		is = append(is, setup()...)
		base := asm.RFP
		off := int16(-8)
		if where != "stack" {
			is = append(is, asm.LoadMapValue(asm.R9, 0, 8).WithReference(where))
			base, off = asm.R9, 0
		}
		is = append(is, stImm(asm.RFP, -8, 0, asm.DWord))
		for _, a := range atom {
			for _, sz := range []asm.Size{asm.Word, asm.DWord} {
				is = append(is, a.Mem(base, asm.R3, sz, off))
			}
		}
		is = append(is, asm.Mov.Reg(asm.R2, asm.RFP), asm.Add.Imm(asm.R2, -8), asm.FetchAdd.Mem(asm.R2, asm.R4, asm.DWord, 0))
		cases["atomic/"+where] = append(is, asm.Mov.Reg(asm.R0, asm.R3), asm.Return())
	}
	return cases
}

func jumpCases() map[string][]asm.Instruction {
	cases := map[string][]asm.Instruction{}
	ops := []asm.JumpOp{asm.JEq, asm.JGT, asm.JGE, asm.JSet, asm.JNE, asm.JSGT, asm.JSGE, asm.JLT, asm.JLE, asm.JSLT, asm.JSLE}
	var is []asm.Instruction
	is = append(is, setup()...)
	for k, op := range ops {
		l := fmt.Sprintf("l%d", k)
		is = append(is,
			op.Imm(asm.R1, -5, l+"a"), asm.Add.Imm(asm.R0, 1),
			op.Reg(asm.R2, asm.R3, l+"b").WithSymbol(l+"a"), asm.Add.Imm(asm.R0, 2),
			op.Imm32(asm.R4, -5, l+"c").WithSymbol(l+"b"), asm.Add.Imm(asm.R0, 3),
			op.Reg32(asm.R5, asm.R6, l+"d").WithSymbol(l+"c"), asm.Add.Imm(asm.R0, 4),
			asm.Mov.Imm(asm.R9, 0).WithSymbol(l+"d"),
		)
	}
	// gotol (32-bit ja) and a bounded loop.
	is = append(is,
		asm.Instruction{OpCode: asm.OpCode(asm.Jump32Class).SetJumpOp(asm.Ja), Constant: 1},
		asm.Add.Imm(asm.R0, 100),
		asm.Mov.Imm(asm.R6, 10),
		asm.Add.Imm(asm.R0, 3).WithSymbol("loop"),
		asm.Sub.Imm(asm.R6, 1),
		asm.JNE.Imm(asm.R6, 0, "loop"),
		asm.Return(),
	)
	cases["jump/all"] = is
	// bpf-to-bpf call with its own stack.
	cases["call/subprog"] = []asm.Instruction{
		asm.Mov.Imm(asm.R1, 5),
		asm.StoreMem(asm.RFP, -8, asm.R1, asm.DWord),
		asm.Call.Label("sub"),
		asm.LoadMem(asm.R1, asm.RFP, -8, asm.DWord),
		asm.Add.Reg(asm.R0, asm.R1),
		asm.Return(),
		asm.StoreMem(asm.RFP, -8, asm.R1, asm.DWord).WithSymbol("sub"),
		asm.LoadMem(asm.R0, asm.RFP, -8, asm.DWord),
		asm.Mul.Imm(asm.R0, 3),
		asm.Call.Label("sub2"),
		asm.Return(),
		asm.Mov.Imm(asm.R0, 9).WithSymbol("sub2"),
		asm.Return(),
	}
	return cases
}

func keyOnStack(v int64) []asm.Instruction {
	return []asm.Instruction{
		stImm(asm.RFP, -8, v, asm.DWord),
		asm.Mov.Reg(asm.R2, asm.RFP), asm.Add.Imm(asm.R2, -8),
	}
}

func helperCases() map[string][]asm.Instruction {
	cases := map[string][]asm.Instruction{}
	for _, m := range []string{"arr", "pta", "hash", "host", "harr", "hpta"} {
		var is []asm.Instruction
		is = append(is, stImm(asm.RFP, -16, 77, asm.DWord), stImm(asm.RFP, -24, 0, asm.DWord))
		is = append(is, asm.LoadMapPtr(asm.R1, 0).WithReference(m))
		is = append(is, keyOnStack(1)...)
		is = append(is, asm.FnMapLookupElem.Call(),
			asm.JEq.Imm(asm.R0, 0, "miss"+m),
			asm.LoadMem(asm.R6, asm.R0, 0, asm.DWord),
			asm.StoreMem(asm.R0, 0, asm.R6, asm.DWord),
			asm.LoadMapPtr(asm.R1, 0).WithReference(m).WithSymbol("miss"+m))
		is = append(is, keyOnStack(2)...)
		is = append(is, asm.Mov.Reg(asm.R3, asm.RFP), asm.Add.Imm(asm.R3, -24), asm.Mov.Imm(asm.R4, 0), asm.FnMapUpdateElem.Call())
		is = append(is, asm.LoadMapPtr(asm.R1, 0).WithReference(m))
		is = append(is, keyOnStack(2)...)
		is = append(is, asm.FnMapDeleteElem.Call(), asm.Return())
		cases["helper/map-"+m] = is
	}
	// A map pointer that goes through the stack: dispatch on its value.
	cases["helper/map-dynamic"] = []asm.Instruction{
		asm.LoadMapPtr(asm.R1, 0).WithReference("arr"),
		asm.JEq.Imm(asm.R6, 0, "skip"),
		asm.LoadMapPtr(asm.R1, 0).WithReference("hash"),
		asm.StoreMem(asm.RFP, -16, asm.R1, asm.DWord).WithSymbol("skip"),
		stImm(asm.RFP, -8, 0, asm.DWord),
		asm.Mov.Reg(asm.R2, asm.RFP), asm.Add.Imm(asm.R2, -8),
		asm.LoadMem(asm.R1, asm.RFP, -16, asm.DWord),
		asm.FnMapLookupElem.Call(),
		asm.Return(),
	}
	// Ring buffer: output, reserve/submit/discard, perf_event_output.
	cases["helper/ring"] = []asm.Instruction{
		stImm(asm.RFP, -8, 42, asm.DWord),
		asm.LoadMapPtr(asm.R1, 0).WithReference("ring"),
		asm.Mov.Reg(asm.R2, asm.RFP), asm.Add.Imm(asm.R2, -8), asm.Mov.Imm(asm.R3, 8), asm.Mov.Imm(asm.R4, 0),
		asm.FnRingbufOutput.Call(),
		asm.Mov.Imm(asm.R1, 0),
		asm.LoadMapPtr(asm.R2, 0).WithReference("ring"),
		asm.LoadImm(asm.R3, 0xffffffff, asm.DWord),
		asm.Mov.Reg(asm.R4, asm.RFP), asm.Add.Imm(asm.R4, -8), asm.Mov.Imm(asm.R5, 8),
		asm.FnPerfEventOutput.Call(),
		asm.LoadMapPtr(asm.R1, 0).WithReference("ring"),
		asm.Mov.Imm(asm.R2, 16), asm.Mov.Imm(asm.R3, 0),
		asm.FnRingbufReserve.Call(),
		asm.JEq.Imm(asm.R0, 0, "out"),
		stImm(asm.R0, 0, 1, asm.DWord),
		asm.Mov.Reg(asm.R1, asm.R0), asm.Mov.Imm(asm.R2, 0),
		asm.FnRingbufSubmit.Call(),
		asm.LoadMapPtr(asm.R1, 0).WithReference("ring"),
		asm.Mov.Imm(asm.R2, 16), asm.Mov.Imm(asm.R3, 0),
		asm.FnRingbufReserve.Call(),
		asm.JEq.Imm(asm.R0, 0, "out"),
		asm.Mov.Reg(asm.R1, asm.R0), asm.Mov.Imm(asm.R2, 0),
		asm.FnRingbufDiscard.Call(),
		asm.Mov.Imm(asm.R0, 0).WithSymbol("out"),
		asm.Return(),
	}
	// bpf_probe_read{,_user,_kernel}{,_str}: from a map value, from a
	// pointer read out of ctx, and from NULL.
	var pr []asm.Instruction
	for _, id := range []asm.BuiltinFunc{4, 112, 113, 45, 114, 115} {
		pr = append(pr,
			asm.Mov.Reg(asm.R1, asm.RFP), asm.Add.Imm(asm.R1, -16), asm.Mov.Imm(asm.R2, 16),
			asm.LoadMapValue(asm.R3, 0, 0).WithReference("arr"), id.Call(),
			asm.LoadMem(asm.R3, asm.R6, 8, asm.DWord),
			asm.Mov.Reg(asm.R1, asm.RFP), asm.Add.Imm(asm.R1, -24), asm.Mov.Imm(asm.R2, 8), id.Call(),
			asm.Mov.Reg(asm.R1, asm.RFP), asm.Add.Imm(asm.R1, -3), asm.Mov.Imm(asm.R2, 3), asm.Mov.Imm(asm.R3, 0), id.Call(),
		)
	}
	cases["helper/probe-read"] = append(append([]asm.Instruction{asm.Mov.Reg(asm.R6, asm.R1)}, pr...), asm.Return())
	var is []asm.Instruction
	is = append(is,
		stImm(asm.RFP, -8, 0x0a6425, asm.DWord), // "%d\n"
		asm.Mov.Reg(asm.R1, asm.RFP), asm.Add.Imm(asm.R1, -8), asm.Mov.Imm(asm.R2, 4),
		asm.Mov.Imm(asm.R3, 1), asm.Mov.Imm(asm.R4, 2), asm.Mov.Imm(asm.R5, 3),
		asm.FnTracePrintk.Call(),
		asm.Mov.Reg(asm.R1, asm.RFP), asm.Add.Imm(asm.R1, -8),
		asm.BuiltinFunc(501).Call(),
	)
	for _, id := range []asm.BuiltinFunc{5, 7, 8, 14, 502, 506, 509, 510, 511, 600, 601, 602} {
		is = append(is, id.Call(), asm.StoreMem(asm.RFP, -16, asm.R0, asm.DWord))
	}
	for _, id := range []asm.BuiltinFunc{503, 504, 505, 508} {
		is = append(is, asm.Mov.Reg(asm.R1, asm.RFP), asm.Add.Imm(asm.R1, -32),
			asm.Mov.Reg(asm.R2, asm.RFP), asm.Add.Imm(asm.R2, -40),
			asm.Mov.Reg(asm.R3, asm.RFP), asm.Add.Imm(asm.R3, -48), id.Call())
	}
	is = append(is, asm.Mov.Imm(asm.R1, 5), asm.Mov.Imm(asm.R2, 0), asm.LoadImm(asm.R3, 0xffffffff, asm.DWord), asm.BuiltinFunc(603).Call())
	is = append(is, asm.LoadMem(asm.R0, asm.RFP, -32, asm.DWord), asm.JEq.Imm(asm.R0, 7, "x"), asm.Return(), asm.BuiltinFunc(507).Call().WithSymbol("x"), asm.Return())
	cases["helper/gpu"] = is
	return cases
}

func allCases() map[string][]asm.Instruction {
	all := map[string][]asm.Instruction{}
	for _, m := range []map[string][]asm.Instruction{aluCases(), memCases(), jumpCases(), helperCases()} {
		for k, v := range m {
			all[k] = v
		}
	}
	all["empty"] = ret0()
	return all
}

func TestCompileAssembles(t *testing.T) {
	for name, insns := range allCases() {
		t.Run(name, func(t *testing.T) {
			f, err := Compile(prog(insns...), testOpts())
			if err != nil {
				t.Fatal(err)
			}
			assemble(t, f)
		})
	}
}

func TestRefused(t *testing.T) {
	cases := map[string][]asm.Instruction{
		"tailcall":      {asm.FnTailCall.Call(), asm.Return()},
		"unknown":       {asm.BuiltinFunc(9999).Call(), asm.Return()},
		"kfunc":         {{OpCode: asm.Call.Op(asm.ImmSource), Src: asm.PseudoKfuncCall, Constant: 5}, asm.Return()},
		"stack-oob":     {stImm(asm.RFP, -520, 1, asm.DWord), asm.Return()},
		"fall-off":      {asm.Mov.Imm(asm.R0, 0)},
		"jump-out":      {{OpCode: asm.Ja.Op(asm.ImmSource), Offset: 5}, asm.Return()},
		"unplaced-map":  {asm.LoadMapPtr(asm.R1, 0).WithReference("nope"), asm.Return()},
		"legacy-packet": {asm.LoadAbs(0, asm.Byte), asm.Return()},
		"write-r10":     {asm.Mov.Imm(asm.RFP, 0), asm.Return()},
	}
	for name, insns := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Compile(prog(insns...), testOpts())
			if err == nil {
				t.Fatal("compiled a program that must be refused")
			}
			if !strings.Contains(err.Error(), "instruction") {
				t.Fatalf("error does not name the instruction: %v", err)
			}
			t.Log(err)
		})
	}
	_, err := Compile(prog(asm.FnTailCall.Call(), asm.Return()), testOpts())
	if !errors.Is(err, ErrUnsupported) {
		t.Fatalf("tail call error does not wrap ErrUnsupported: %v", err)
	}
}

func TestUsesCtx(t *testing.T) {
	f, err := Compile(prog(ret0()...), testOpts())
	if err != nil {
		t.Fatal(err)
	}
	if f.UsesCtx {
		t.Fatal("empty probe claims to use ctx")
	}
	f, err = Compile(prog(asm.LoadMem(asm.R0, asm.R1, 8, asm.DWord), asm.Return()), testOpts())
	if err != nil {
		t.Fatal(err)
	}
	if !f.UsesCtx {
		t.Fatal("ctx reader does not claim ctx")
	}
}

// TestTwoProbesOneModule checks that two probes' runtime functions do not clash.
func TestTwoProbesOneModule(t *testing.T) {
	o := testOpts()
	o.FuncName = "entry_probe"
	a, err := Compile(prog(helperCases()["helper/ring"]...), o)
	if err != nil {
		t.Fatal(err)
	}
	o.FuncName = "exit_probe"
	b, err := Compile(prog(helperCases()["helper/ring"]...), o)
	if err != nil {
		t.Fatal(err)
	}
	a.PTX += b.PTX
	assemble(t, a)
}

// stImm builds a store-immediate of any size (cilium/ebpf's asm.StoreImm
// refuses DWord, which the kernel accepts).
func stImm(dst asm.Register, off int16, v int64, sz asm.Size) asm.Instruction {
	return asm.Instruction{OpCode: asm.StoreImmOp(sz), Dst: dst, Offset: off, Constant: v}
}

func writeFile(t testing.TB, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestEmittedForms pins a few translations whose mistakes would only show
// on the GPU (the differential test covers them all there).
func TestEmittedForms(t *testing.T) {
	for _, c := range []struct {
		ins  asm.Instruction
		want string
	}{
		{asm.MovSX8.Reg(asm.R5, asm.R8), "shl.b64 %t0, %r8, 56;"},
		{asm.MovSX16.Reg(asm.R5, asm.R8), "shl.b64 %t0, %r8, 48;"},
		{asm.MovSX32.Reg(asm.R5, asm.R8), "shl.b64 %t0, %r8, 32;"},
		{asm.MovSX8.Reg32(asm.R5, asm.R8), "shl.b32 %w1, %w2, 24;"},
		{asm.LSh.Imm(asm.R5, 63), "shl.b64 %r5, %r5, 63;"},
		{asm.HostTo(asm.BE, asm.R5, asm.Half), "prmt.b32 %w1, %w1, 0, 0x4401;"},
		{asm.Div.Imm(asm.R5, -1), "div.u64 %t1, %r5, %t1;"},
		// a stack slot nothing else reaches lives in a register
		{asm.StoreMem(asm.RFP, -8, asm.R1, asm.DWord), "mov.b64 %gs63, %r1;"},
	} {
		f, err := Compile(prog(c.ins, asm.Return()), testOpts())
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(f.PTX, c.want) {
			t.Errorf("%v: PTX lacks %q:\n%s", c.ins, c.want, f.PTX)
		}
	}
	// A pointer derived from r10 keeps constant-offset addressing (here:
	// bits 32-63 of slot 62's register).
	f, err := Compile(prog(asm.Mov.Reg(asm.R2, asm.RFP), asm.Add.Imm(asm.R2, -16), asm.StoreMem(asm.R2, 4, asm.R1, asm.Word), asm.Return()), testOpts())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(f.PTX, "bfi.b64 %gs62, %r1, %gs62, 32, 32;") {
		t.Errorf("derived stack pointer not addressed as .local:\n%s", f.PTX)
	}
}

// TestKernelIndex: bpf_gpu_kernel_index is the number InlineAt is
// given where the body is pasted, and UnknownKernel in the called form.
func TestKernelIndex(t *testing.T) {
	f, err := Compile(prog(asm.BuiltinFunc(600).Call(), asm.Return()), Options{FuncName: "kid"})
	if err != nil {
		t.Fatal(err)
	}
	if !f.UsesKernelIndex {
		t.Fatal("UsesKernelIndex not set")
	}
	if !strings.Contains(f.PTX, "mov.u64 %r0, 4294967295;") || strings.Contains(f.PTX, kernelIndexToken) {
		t.Fatalf("called form does not return UnknownKernel:\n%s", f.PTX)
	}
	body := f.InlineAt(Site{Ctx: "0", Uniq: "p", Kernel: 7})
	if !strings.Contains(body, "mov.u64 %r0, 7;") {
		t.Fatalf("inline body does not return 7:\n%s", body)
	}
	// A register, where the index is only known at run time, wins over
	// the constant.
	body = f.InlineAt(Site{Ctx: "0", Uniq: "p", Kernel: 7, KernelReg: "%gpubpf_k"})
	if !strings.Contains(body, "mov.u64 %r0, %gpubpf_k;") || strings.Contains(body, kernelIndexToken) {
		t.Fatalf("inline body does not return the site's kernel register:\n%s", body)
	}
	if g, _ := Compile(prog(asm.Mov.Imm(asm.R0, 0), asm.Return()), Options{}); g.UsesKernelIndex {
		t.Fatal("UsesKernelIndex set for a program that never asks")
	}
}

// TestLaunchWord: bpf_gpu_launch_word(i) selects between the registers the
// site names, and is 0 in the called form or where the kernel has none.
func TestLaunchWord(t *testing.T) {
	f, err := Compile(prog(asm.Mov.Imm(asm.R1, 1), asm.BuiltinFunc(605).Call(), asm.Return()), Options{FuncName: "lw"})
	if err != nil {
		t.Fatal(err)
	}
	if !f.UsesLaunchWords {
		t.Fatal("UsesLaunchWords not set")
	}
	if !strings.Contains(f.PTX, "selp.b64 %r0, 0, 0, %p1;") {
		t.Fatalf("called form does not return 0:\n%s", f.PTX)
	}
	body := f.InlineAt(Site{Ctx: "0", Uniq: "p", Launch: [2]string{"%lw0", "%lw1"}})
	if !strings.Contains(body, "setp.eq.u64 %p1, %r1, 0;") || !strings.Contains(body, "selp.b64 %r0, %lw0, %lw1, %p1;") {
		t.Fatalf("inline body does not select the site's registers:\n%s", body)
	}
	if body := f.InlineBody("0", "", "p"); !strings.Contains(body, "selp.b64 %r0, 0, 0, %p1;") {
		t.Fatalf("inline body without launch words is not 0:\n%s", body)
	}
}

// TestClockRegisters: bpf_gpu_site_time and bpf_gpu_entry_time are the
// register the site names where the body is pasted; with none (or in the
// called form) the site time reads the clock itself and the entry time is
// 0 (the kernel's entry is out of reach).
func TestClockRegisters(t *testing.T) {
	for _, c := range []struct {
		id      int64
		uses    func(*Function) bool
		site    func(reg string) Site
		without string // what the helper is with no register
	}{
		{604, func(f *Function) bool { return f.UsesSiteTime }, func(r string) Site { return Site{Ctx: "0", Uniq: "p", Time: r} }, "%globaltimer"},
		{607, func(f *Function) bool { return f.UsesEntryTime }, func(r string) Site { return Site{Ctx: "0", Uniq: "p", EntryTime: r} }, "0"},
	} {
		f, err := Compile(prog(asm.BuiltinFunc(c.id).Call(), asm.Return()), Options{FuncName: "clk"})
		if err != nil {
			t.Fatal(err)
		}
		if !c.uses(f) {
			t.Fatalf("helper %d: not marked used", c.id)
		}
		want := "mov.u64 %r0, " + c.without + ";"
		if !strings.Contains(f.PTX, want) || strings.Contains(f.PTX, "GPUBPF_") {
			t.Fatalf("helper %d: called form lacks %q:\n%s", c.id, want, f.PTX)
		}
		if body := f.InlineAt(c.site("%reg7")); !strings.Contains(body, "mov.u64 %r0, %reg7;") {
			t.Fatalf("helper %d: inline body does not return the site's register:\n%s", c.id, body)
		}
		if body := f.InlineBody("0", "", "p"); !strings.Contains(body, want) || strings.Contains(body, "GPUBPF_") {
			t.Fatalf("helper %d: inline body without a register lacks %q:\n%s", c.id, want, body)
		}
		if g, _ := Compile(prog(asm.Mov.Imm(asm.R0, 0), asm.Return()), Options{}); c.uses(g) {
			t.Fatalf("helper %d: marked used by a program that never calls it", c.id)
		}
	}
}

// TestThreadID: bpf_gpu_thread_id reads special registers only.
func TestThreadID(t *testing.T) {
	f, err := Compile(prog(asm.BuiltinFunc(606).Call(), asm.Return()), Options{FuncName: "tid"})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"%ctaid.z", "%tid.x", "%ntid.z"} {
		if !strings.Contains(f.PTX, want) {
			t.Errorf("no %s in:\n%s", want, f.PTX)
		}
	}
	if strings.Contains(f.PTX, "st.local") {
		t.Errorf("stack traffic in:\n%s", f.PTX)
	}
}

// jumpBy sets a jump's offset in instructions.
func jumpBy(j asm.Instruction, off int16) asm.Instruction {
	j.Offset = off
	return j.WithReference("")
}

// TestFirstThreadTest: "bpf_gpu_thread_id() != 0" (and "== 0") right after
// the call tests the index registers; a 32-bit compare, another register,
// a constant other than 0, or a test that is a jump target keeps the
// linear id's compare. (The GPU case first-thread in difftest runs it.)
func TestFirstThreadTest(t *testing.T) {
	const or = "setp.%s.u32 %%p0, %%w8, 0;"
	for _, c := range []struct {
		name  string
		insns asm.Instructions
		want  string // "" when the plain compare must stay
	}{
		{"ne", asm.Instructions{asm.BuiltinFunc(606).Call(), jumpBy(asm.JNE.Imm(asm.R0, 0, ""), 1), asm.Mov.Imm(asm.R0, 7), asm.Return()}, fmt.Sprintf(or, "ne")},
		{"eq", asm.Instructions{asm.BuiltinFunc(606).Call(), jumpBy(asm.JEq.Imm(asm.R0, 0, ""), 1), asm.Mov.Imm(asm.R0, 7), asm.Return()}, fmt.Sprintf(or, "eq")},
		{"32-bit", asm.Instructions{asm.BuiltinFunc(606).Call(), jumpBy(asm.JNE.Imm32(asm.R0, 0, ""), 1), asm.Mov.Imm(asm.R0, 7), asm.Return()}, ""},
		{"not 0", asm.Instructions{asm.BuiltinFunc(606).Call(), jumpBy(asm.JNE.Imm(asm.R0, 1, ""), 1), asm.Mov.Imm(asm.R0, 7), asm.Return()}, ""},
		{"other register", asm.Instructions{asm.BuiltinFunc(606).Call(), asm.Mov.Reg(asm.R6, asm.R0), jumpBy(asm.JNE.Imm(asm.R6, 0, ""), 1), asm.Mov.Imm(asm.R0, 7), asm.Return()}, ""},
		// another path reaches the test with r0 = 0, not an id
		{"jump target", asm.Instructions{asm.Mov.Imm(asm.R0, 0), jumpBy(asm.JEq.Imm(asm.R1, 5, ""), 1), asm.BuiltinFunc(606).Call(), jumpBy(asm.JNE.Imm(asm.R0, 0, ""), 1), asm.Mov.Imm(asm.R0, 7), asm.Return()}, ""},
	} {
		f, err := Compile(prog(c.insns...), Options{FuncName: "first"})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		got := strings.Contains(f.PTX, "%w8, 0;")
		if c.want != "" && !strings.Contains(f.PTX, c.want) || c.want == "" && got {
			t.Errorf("%s: want %q (or none): got\n%s", c.name, c.want, f.PTX)
		}
		// ctaid.x alone first, as a uniform branch; the other five only
		// after the warp sync that keeps ptxas from hoisting them
		if c.want != "" {
			x, sync, y := strings.Index(f.PTX, "%ctaid.x;\n\tsetp.ne.u32 %p0, %w8, 0;\n\t@%p0 bra.uni"), strings.Index(f.PTX, "bar.warp.sync"), strings.Index(f.PTX, "mov.u32 %w9, %tid.y")
			if x < 0 || sync < x || y < sync {
				t.Errorf("%s: want the ctaid.x test, the warp sync, then the rest: got\n%s", c.name, f.PTX)
			}
		}
		// the id itself is still computed for any later use
		if !strings.Contains(f.PTX, "%ntid.z") {
			t.Errorf("%s: the linear id is gone:\n%s", c.name, f.PTX)
		}
		assemble(t, f)
	}
}

// TestAtomicMax: bpf_gpu_atomic_max is one atom.max on global memory, a
// plain read-modify-write on the stack, and returns the old value; the
// module assembles.
func TestAtomicMax(t *testing.T) {
	f, err := Compile(prog(
		asm.Instruction{OpCode: asm.StoreImmOp(asm.DWord), Dst: asm.RFP, Offset: -8, Constant: 5},
		asm.Mov.Reg(asm.R1, asm.RFP), asm.Add.Imm(asm.R1, -8),
		asm.Mov.Imm(asm.R2, 9),
		asm.BuiltinFunc(608).Call(),
		asm.Mov.Reg(asm.R6, asm.R0),
		asm.LoadMem(asm.R1, asm.R6, 0, asm.DWord), // a pointer the compiler cannot place
		asm.Mov.Imm(asm.R2, 7),
		asm.BuiltinFunc(608).Call(),
		asm.Return(),
	), Options{FuncName: "amax"})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"max.u64 %t3, %t2, %r2;", "atom.global.gpu.max.u64 %t2, [%t4], %r2;", "mov.u64 %r0, %r2;"} {
		if !strings.Contains(f.PTX, want) {
			t.Errorf("no %q in:\n%s", want, f.PTX)
		}
	}
	assemble(t, f)
}

// GPUBPF_RING_PRECHECK: the claimed-bytes load and its branch are in the
// reservation exactly when ringPrecheck is set, and it assembles either way.
func TestRingPrecheckVariant(t *testing.T) {
	defer func(v bool) { ringPrecheck = v }(ringPrecheck)
	for _, on := range []bool{false, true} {
		ringPrecheck = on
		src := runtimeFunc("__gpubpf_rb_reserve", "")
		load := strings.Contains(src, "ld.relaxed.gpu.u64 %a9, [%a0+192]")
		branch := strings.Contains(src, "@%q5 bra $FULLNOW;")
		if load != on || branch != on {
			t.Fatalf("ringPrecheck %v: claimed-bytes load %v, full pre-check branch %v", on, load, branch)
		}
		f, err := Compile(prog(helperCases()["helper/ring"]...), testOpts())
		if err != nil {
			t.Fatal(err)
		}
		assemble(t, f)
	}
}

// The reservation keys shards by the warp's index in the grid (no %smid, no
// %warpid) unless GPUBPF_RING_KEY=slot, and the ring helpers assemble either
// way.
func TestRingGridWarpKey(t *testing.T) {
	defer func(v bool) { ringKeyByGridWarp = v }(ringKeyByGridWarp)
	for _, on := range []bool{false, true} {
		ringKeyByGridWarp = on
		src := runtimeFunc("__gpubpf_rb_reserve", "")
		if slot := strings.Contains(src, "%smid") && strings.Contains(src, "%warpid"); slot == on {
			t.Fatalf("grid-warp key %v: hardware-slot key in the reservation %v:\n%s", on, slot, src)
		}
		if grid := strings.Contains(src, "%ctaid.z") && strings.Contains(src, "%nctaid.y"); grid != on {
			t.Fatalf("grid-warp key %v: grid-warp key in the reservation %v:\n%s", on, grid, src)
		}
		f, err := Compile(prog(helperCases()["helper/ring"]...), testOpts())
		if err != nil {
			t.Fatal(err)
		}
		assemble(t, f)
	}
}

// TestProbeRead: the six probe_read helpers call the copy or the string
// runtime function with size cut to Linux's u32, and both refuse the first
// page before they load; a read of 1, 2, 4 or 8 bytes to a stack address
// aligned to its size loads by itself (and refuses the first page too).
func TestProbeRead(t *testing.T) {
	for _, id := range []asm.BuiltinFunc{4, 112, 113} {
		for _, c := range []struct {
			size, dst int32
			inline    bool
		}{{1, -1, true}, {2, -6, true}, {4, -12, true}, {8, -16, true}, {2, -7, false}, {8, -12, false}, {3, -8, false}, {16, -16, false}} {
			f, err := Compile(prog(asm.Mov.Reg(asm.R1, asm.RFP), asm.Add.Imm(asm.R1, c.dst), asm.Mov.Imm(asm.R2, c.size), asm.Mov.Imm(asm.R3, 0), id.Call(), asm.Return()), testOpts())
			if err != nil {
				t.Fatal(err)
			}
			got := !strings.Contains(f.PTX, "probe__rt_probe_read")
			if got != c.inline || got && (!strings.Contains(f.PTX, "setp.lt.u64 %p1, %r3, 4096;") || !strings.Contains(f.PTX, "0xFFFFFFFFFFFFFFF2") ||
				!strings.Contains(f.PTX, fmt.Sprintf("st.local.u%d [stk+", 8*c.size)) && !strings.Contains(f.PTX, "%gs")) {
				t.Errorf("%v: %d bytes to r10%d: inline %v, want %v:\n%s", id, c.size, c.dst, got, c.inline, f.PTX)
			}
			assemble(t, f)
		}
	}

	for _, c := range []struct {
		id  asm.BuiltinFunc
		str bool
	}{{4, false}, {112, false}, {113, false}, {45, true}, {114, true}, {115, true}} {
		t.Run(c.id.String(), func(t *testing.T) {
			f, err := Compile(prog(asm.Mov.Reg(asm.R1, asm.RFP), asm.Add.Imm(asm.R1, -16), asm.Mov.Imm(asm.R2, 16), asm.Mov.Imm(asm.R3, 0), c.id.Call(), asm.Return()), testOpts())
			if err != nil {
				t.Fatal(err)
			}
			fn, memcpy := "probe__rt_probe_read,", true
			if c.str {
				fn, memcpy = "probe__rt_probe_read_str,", false
			}
			for _, want := range []string{"and.b64 %t5, %r2, 0xFFFFFFFF;", "call.uni (rv), " + fn, "setp.lt.u64 %q0, %a2, 4096;", "0xFFFFFFFFFFFFFFF2"} {
				if !strings.Contains(f.PTX, want) {
					t.Errorf("PTX lacks %q:\n%s", want, f.PTX)
				}
			}
			if got := strings.Contains(f.PTX, ".func probe__rt_memcpy("); got != memcpy {
				t.Errorf("memcpy included: %v, want %v", got, memcpy)
			}
			assemble(t, f)
		})
	}
}

// mixedJoin is a program whose r6 is ctx on one path and a stack address
// on the other where they meet, after a read of ctx+12; then tail, then
// exit.
func mixedJoin(tail ...asm.Instruction) []asm.Instruction {
	insns := []asm.Instruction{
		asm.Mov.Reg(asm.R6, asm.R1), asm.LoadMem(asm.R8, asm.R6, 12, asm.Word), asm.BuiltinFunc(606).Call(),
		asm.JEq.Imm(asm.R0, 0, "l"), stImm(asm.RFP, -16, 0, asm.DWord), asm.Mov.Reg(asm.R6, asm.RFP), asm.Add.Imm(asm.R6, -16),
		asm.Mov.Imm(asm.R0, 0).WithSymbol("l"),
	}
	insns = append(insns, tail...)
	return append(insns, asm.Mov.Imm(asm.R0, 0), asm.Return())
}

// TestCtxBytes: the end of the furthest ctx access, followed through moves,
// constant offsets and joins, and CtxMax once a ctx pointer goes where the
// compiler does not follow it.
func TestCtxBytes(t *testing.T) {
	ld := asm.LoadMem
	for _, c := range []struct {
		name  string
		insns []asm.Instruction
		uses  bool
		want  int
	}{
		{"no-ctx", ret0(), false, 0},
		{"ctx-unread", ret0(asm.Mov.Reg(asm.R6, asm.R1)), false, 0},
		{"constant", []asm.Instruction{ld(asm.R0, asm.R1, 8, asm.DWord), asm.Return()}, true, 16},
		{"moved", []asm.Instruction{asm.Mov.Reg(asm.R6, asm.R1), asm.Mov.Imm(asm.R1, 0), ld(asm.R0, asm.R6, 24, asm.Word), asm.Return()}, true, 28},
		{"offset", []asm.Instruction{asm.Mov.Reg(asm.R6, asm.R1), asm.Add.Imm(asm.R6, 16), ld(asm.R0, asm.R6, 4, asm.Half), asm.Return()}, true, 22},
		{"offset-sub", []asm.Instruction{asm.Sub.Imm(asm.R1, -40), ld(asm.R0, asm.R1, -8, asm.DWord), asm.Return()}, true, 40},
		{"constant-register", []asm.Instruction{asm.Mov.Imm(asm.R2, 32), asm.Add.Reg(asm.R1, asm.R2), ld(asm.R0, asm.R1, 0, asm.Byte), asm.Return()}, true, 33},
		{"constant-plus-ctx", []asm.Instruction{asm.LoadImm(asm.R2, 60, asm.DWord), asm.Add.Reg(asm.R2, asm.R1), ld(asm.R0, asm.R2, 0, asm.Word), asm.Return()}, true, 64},
		{"join", []asm.Instruction{
			asm.Mov.Reg(asm.R6, asm.R1), asm.BuiltinFunc(606).Call(),
			asm.JEq.Imm(asm.R0, 0, "l"), asm.Add.Imm(asm.R6, 40),
			ld(asm.R0, asm.R6, 0, asm.DWord).WithSymbol("l"), asm.Return()}, true, 48},
		// clang reuses a register that held ctx for a stack address on
		// one branch; where the branches meet it is dead (mem_trace).
		{"join-ctx-and-stack-dead", mixedJoin(asm.Mov.Imm(asm.R0, 0)), true, 16},
		{"join-ctx-and-stack-read", mixedJoin(ld(asm.R0, asm.R6, 0, asm.Byte)), true, CtxMax},
		{"join-ctx-and-stack-moved-read", mixedJoin(asm.Mov.Reg(asm.R7, asm.R6), asm.Add.Imm(asm.R7, 8), ld(asm.R0, asm.R7, 0, asm.Byte)), true, CtxMax},
		{"join-ctx-and-stack-spilled-read", mixedJoin(asm.StoreMem(asm.RFP, -32, asm.R6, asm.DWord),
			asm.LoadMem(asm.R7, asm.RFP, -32, asm.DWord), ld(asm.R0, asm.R7, 0, asm.Byte)), true, CtxMax},
		{"join-ctx-and-stack-helper", mixedJoin(asm.Mov.Reg(asm.R2, asm.R6), asm.LoadMapPtr(asm.R1, 0).WithReference("hash"),
			asm.FnMapLookupElem.Call()), true, CtxMax},
		{"join-ctx-and-stack-stored", mixedJoin(asm.LoadMapValue(asm.R2, 0, 0).WithReference("arr"), asm.StoreMem(asm.R2, 0, asm.R6, asm.DWord)), true, CtxMax},
		{"join-ctx-and-stack-32-bit", mixedJoin(asm.Mov.Reg32(asm.R7, asm.R6)), true, CtxMax},
		{"helper-without-args", []asm.Instruction{asm.BuiltinFunc(606).Call(), asm.Mov.Reg(asm.R6, asm.R1), asm.Return()}, false, 0},
		{"store-into-ctx", []asm.Instruction{stImm(asm.R1, 100, 7, asm.Word), asm.Mov.Imm(asm.R0, 0), asm.Return()}, true, 104},
		{"both-exits", []asm.Instruction{
			asm.JEq.Imm(asm.R2, 0, "l"), ld(asm.R0, asm.R1, 200, asm.DWord), asm.Return(),
			ld(asm.R0, asm.R1, 8, asm.DWord).WithSymbol("l"), asm.Return()}, true, 208},
		{"variable-offset", []asm.Instruction{
			asm.Mov.Reg(asm.R6, asm.R1), asm.BuiltinFunc(606).Call(), asm.Add.Reg(asm.R6, asm.R0),
			ld(asm.R0, asm.R6, 0, asm.Byte), asm.Return()}, true, CtxMax},
		{"loop", []asm.Instruction{
			asm.Mov.Imm(asm.R2, 4),
			ld(asm.R0, asm.R1, 0, asm.DWord).WithSymbol("l"), asm.Add.Imm(asm.R1, 8), asm.Sub.Imm(asm.R2, 1),
			asm.JNE.Imm(asm.R2, 0, "l"), asm.Return()}, true, CtxMax},
		{"spilled", []asm.Instruction{
			asm.StoreMem(asm.RFP, -16, asm.R1, asm.DWord), asm.Mov.Imm(asm.R1, 0), asm.BuiltinFunc(606).Call(),
			asm.LoadMem(asm.R6, asm.RFP, -16, asm.DWord), ld(asm.R0, asm.R6, 12, asm.Word), asm.Return()}, true, 16},
		{"spilled-through-stack-pointer", []asm.Instruction{
			asm.Mov.Reg(asm.R7, asm.RFP), asm.Add.Imm(asm.R7, -24), asm.StoreMem(asm.RFP, -8, asm.R7, asm.DWord),
			asm.LoadMem(asm.R8, asm.RFP, -8, asm.DWord), asm.StoreMem(asm.R8, 8, asm.R1, asm.DWord),
			asm.LoadMem(asm.R6, asm.RFP, -16, asm.DWord), ld(asm.R0, asm.R6, 30, asm.Half), asm.Return()}, true, 32},
		{"spill-overwritten", []asm.Instruction{
			asm.StoreMem(asm.RFP, -8, asm.R1, asm.DWord), stImm(asm.RFP, -8, 0, asm.Word),
			asm.LoadMem(asm.R6, asm.RFP, -8, asm.DWord), ld(asm.R0, asm.R6, 0, asm.Word), asm.Return()}, false, 0},
		{"stored-to-map", []asm.Instruction{
			asm.LoadMapValue(asm.R2, 0, 0).WithReference("arr"), asm.StoreMem(asm.R2, 0, asm.R1, asm.DWord), asm.Return()}, true, CtxMax},
		{"half-spilled", []asm.Instruction{asm.StoreMem(asm.RFP, -8, asm.R1, asm.Word), asm.Return()}, true, CtxMax},
		{"spill-seen-by-subprogram", []asm.Instruction{
			asm.StoreMem(asm.RFP, -8, asm.R1, asm.DWord), asm.Mov.Reg(asm.R1, asm.RFP), asm.Add.Imm(asm.R1, -8),
			asm.Call.Label("sub"), asm.Return(),
			asm.LoadMem(asm.R0, asm.R1, 0, asm.DWord).WithSymbol("sub"), asm.Return()}, true, CtxMax},
		{"helper-argument", []asm.Instruction{
			asm.Mov.Reg(asm.R3, asm.R1), asm.Add.Imm(asm.R3, 8),
			asm.Mov.Reg(asm.R1, asm.RFP), asm.Add.Imm(asm.R1, -8), asm.Mov.Imm(asm.R2, 8),
			asm.FnProbeReadKernel.Call(), asm.Return()}, true, CtxMax},
		{"perf-event-output-ctx", []asm.Instruction{
			stImm(asm.RFP, -8, 1, asm.DWord), asm.Mov.Reg(asm.R6, asm.R1),
			asm.LoadMapPtr(asm.R2, 0).WithReference("ring"), asm.LoadImm(asm.R3, 0xffffffff, asm.DWord),
			asm.Mov.Reg(asm.R4, asm.RFP), asm.Add.Imm(asm.R4, -8), asm.Mov.Imm(asm.R5, 8),
			asm.FnPerfEventOutput.Call(), ld(asm.R0, asm.R6, 8, asm.Word), asm.Return()}, true, 12},
		{"map-key", []asm.Instruction{
			asm.Mov.Reg(asm.R2, asm.R1), asm.LoadMapPtr(asm.R1, 0).WithReference("hash"),
			asm.FnMapLookupElem.Call(), asm.Return()}, true, CtxMax},
		{"subprogram-argument", []asm.Instruction{
			asm.Call.Label("sub"), asm.Return(),
			ld(asm.R0, asm.R1, 0, asm.Byte).WithSymbol("sub"), asm.Return()}, true, CtxMax},
		{"32-bit", []asm.Instruction{asm.Add.Imm32(asm.R1, 8), ld(asm.R0, asm.R1, 0, asm.Byte), asm.Return()}, true, CtxMax},
		{"past-ctxmax", []asm.Instruction{ld(asm.R0, asm.R1, 5000, asm.Byte), asm.Return()}, true, CtxMax},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, err := Compile(prog(c.insns...), testOpts())
			if err != nil {
				t.Fatal(err)
			}
			if f.UsesCtx != c.uses || f.CtxBytes != c.want {
				t.Errorf("UsesCtx %v CtxBytes %d, want %v %d", f.UsesCtx, f.CtxBytes, c.uses, c.want)
			}
		})
	}
}

// TestHostResidentScope: on a host-backed array or per-thread array (1513,
// 1512) every atomic a program makes is system-scoped — on the value it
// looked up and on the per-thread array's error counter — since the GPU
// reaches that memory over the host link and the host reads it while the
// kernel runs; the same program on device-memory maps stays GPU-scoped.
func TestHostResidentScope(t *testing.T) {
	// v = lookup(m, 0); if (v) { __sync_fetch_and_add(v, 1); xchg(v, 2); }
	// update(m, 1, &val)
	body := func(m string) []asm.Instruction {
		is := []asm.Instruction{stImm(asm.RFP, -16, 5, asm.DWord), asm.LoadMapPtr(asm.R1, 0).WithReference(m)}
		is = append(is, keyOnStack(0)...)
		is = append(is, asm.FnMapLookupElem.Call(),
			asm.JEq.Imm(asm.R0, 0, "miss"),
			asm.Mov.Imm(asm.R1, 1),
			asm.AddAtomic.Mem(asm.R0, asm.R1, asm.DWord, 0),
			asm.Mov.Imm(asm.R1, 2),
			asm.Xchg.Mem(asm.R0, asm.R1, asm.DWord, 0),
			asm.LoadMapPtr(asm.R1, 0).WithReference(m).WithSymbol("miss"))
		is = append(is, keyOnStack(1)...)
		is = append(is, asm.Mov.Reg(asm.R3, asm.RFP), asm.Add.Imm(asm.R3, -16), asm.Mov.Imm(asm.R4, 0), asm.FnMapUpdateElem.Call(), asm.Return())
		return is
	}
	for _, c := range []struct {
		m     string
		scope string
	}{{"harr", "sys"}, {"hpta", "sys"}, {"arr", "gpu"}, {"pta", "gpu"}} {
		t.Run(c.m, func(t *testing.T) {
			f, err := Compile(prog(body(c.m)...), testOpts())
			if err != nil {
				t.Fatal(err)
			}
			other := map[string]string{"sys": "gpu", "gpu": "sys"}[c.scope]
			for _, want := range []string{"red.global." + c.scope + ".add.u64", "atom.global." + c.scope + ".exch.b64"} {
				if !strings.Contains(f.PTX, want) {
					t.Errorf("no %q in:\n%s", want, f.PTX)
				}
			}
			if strings.Contains(f.PTX, "."+other+".") {
				t.Errorf("%s-scoped operation in a program on %s:\n%s", other, c.m, f.PTX)
			}
			if testMaps[c.m].Kind == gpumap.PerThreadArray {
				// Threads past the capacity are counted in the header.
				want := fmt.Sprintf("@%%p2 red.global.%s.add.u64 [%%t7], 1;", c.scope)
				if !strings.Contains(f.PTX, want) {
					t.Errorf("no %q in:\n%s", want, f.PTX)
				}
			}
			assemble(t, f)
		})
	}
}

// TestStackPromotion: a stack slot lives in a register (%gsK) unless its
// address can reach it another way: a helper or subprogram given the
// pointer, the pointer stored to memory, an offset not known where it is
// used. Those slots (or all, where the offset is lost) stay in memory.
func TestStackPromotion(t *testing.T) {
	st := asm.StoreMem
	fp := asm.RFP
	for _, c := range []struct {
		name        string
		insns       []asm.Instruction
		regs, local []string // must appear / stay in memory
		none        bool     // no slot in a register
	}{
		{name: "plain", insns: []asm.Instruction{st(fp, -8, asm.R1, asm.DWord), asm.LoadMem(asm.R0, fp, -8, asm.Word), asm.Return()},
			regs: []string{"mov.b64 %gs63, %r1;", "bfe.u64 %r0, %gs63, 0, 32;"}},
		{name: "signed-load", insns: []asm.Instruction{st(fp, -8, asm.R1, asm.DWord),
			{OpCode: asm.LoadMemSXOp(asm.Half), Dst: asm.R0, Src: fp, Offset: -6}, asm.Return()},
			regs: []string{"bfe.s64 %r0, %gs63, 16, 16;"}},
		{name: "probe-read-destination", insns: []asm.Instruction{
			st(fp, -24, asm.R1, asm.DWord), st(fp, -16, asm.R1, asm.DWord), st(fp, -8, asm.R1, asm.DWord),
			asm.Mov.Reg(asm.R1, fp), asm.Add.Imm(asm.R1, -16), asm.Mov.Imm(asm.R2, 16), asm.Mov.Imm(asm.R3, 4096),
			asm.FnProbeReadKernel.Call(), asm.LoadMem(asm.R0, fp, -8, asm.DWord), asm.Return()},
			regs: []string{"mov.b64 %gs61, %r1;"}, local: []string{"st.local.u64 [stk+504], %r1;", "ld.local.u64 %r0, [stk+504];"}},
		{name: "probe-read-by-itself", insns: []asm.Instruction{
			st(fp, -8, asm.R1, asm.DWord),
			asm.Mov.Reg(asm.R1, fp), asm.Add.Imm(asm.R1, -8), asm.Mov.Imm(asm.R2, 8), asm.Mov.Imm(asm.R3, 4096),
			asm.FnProbeReadKernel.Call(), asm.LoadMem(asm.R0, fp, -8, asm.DWord), asm.Return()},
			// loaded by the call site: the slot stays in a register, no frame
			regs: []string{"mov.b64 %gs63, %t5;", "mov.b64 %r0, %gs63;"}},
		{name: "ring-record-of-known-size", insns: []asm.Instruction{
			st(fp, -24, asm.R1, asm.DWord), st(fp, -16, asm.R1, asm.DWord), st(fp, -8, asm.R1, asm.DWord),
			asm.LoadMapPtr(asm.R1, 0).WithReference("ring"), asm.Mov.Reg(asm.R2, fp), asm.Add.Imm(asm.R2, -16),
			asm.Mov.Imm(asm.R3, 8), asm.Mov.Imm(asm.R4, 0), asm.FnRingbufOutput.Call(), asm.Return()},
			// copied by the call site's own loads: the record stays in a register
			regs: []string{"mov.b64 %gs61, %r1;", "mov.b64 %gs62, %r1;", "mov.b64 %t9, %gs62;", "st.u64 [%t8+0], %t9;"}},
		{name: "perf-record-in-parts", insns: []asm.Instruction{
			st(fp, -16, asm.R1, asm.DWord), st(fp, -8, asm.R1, asm.Word), st(fp, -4, asm.R1, asm.Half),
			asm.Mov.Reg(asm.R4, fp), asm.Add.Imm(asm.R4, -16), asm.LoadMapPtr(asm.R2, 0).WithReference("ring"),
			asm.Mov.Imm(asm.R3, 0), asm.Mov.Imm(asm.R5, 14), asm.FnPerfEventOutput.Call(), asm.Return()},
			regs: []string{"st.u64 [%t8+0], %t9;", "st.u32 [%t8+8], %t9;", "st.u16 [%t8+12], %t9;", "mov.u32 %w1, 2147483662;"}},
		{name: "ring-record-unaligned", insns: []asm.Instruction{
			st(fp, -24, asm.R1, asm.DWord), st(fp, -16, asm.R1, asm.DWord), st(fp, -8, asm.R1, asm.DWord),
			asm.LoadMapPtr(asm.R1, 0).WithReference("ring"), asm.Mov.Reg(asm.R2, fp), asm.Add.Imm(asm.R2, -12),
			asm.Mov.Imm(asm.R3, 8), asm.Mov.Imm(asm.R4, 0), asm.FnRingbufOutput.Call(), asm.Return()},
			regs: []string{"mov.b64 %gs61, %r1;"}, local: []string{"st.local.u64 [stk+496], %r1;", "st.local.u64 [stk+504], %r1;", "rt_output_gpu"}},
		{name: "ring-record-of-unknown-size", insns: []asm.Instruction{
			st(fp, -16, asm.R1, asm.DWord), st(fp, -8, asm.R1, asm.DWord),
			asm.LoadMapPtr(asm.R1, 0).WithReference("ring"), asm.Mov.Reg(asm.R2, fp), asm.Add.Imm(asm.R2, -16),
			asm.Mov.Reg(asm.R3, asm.R6), asm.Mov.Imm(asm.R4, 0), asm.FnRingbufOutput.Call(), asm.Return()},
			none: true, local: []string{"st.local.u64 [stk+496], %r1;", "rt_output_gpu"}},
		{name: "hash-key", insns: []asm.Instruction{
			st(fp, -16, asm.R1, asm.DWord), st(fp, -8, asm.R1, asm.DWord),
			asm.LoadMapPtr(asm.R1, 0).WithReference("hash"), asm.Mov.Reg(asm.R2, fp), asm.Add.Imm(asm.R2, -16),
			asm.FnMapLookupElem.Call(), asm.Return()},
			regs: []string{"mov.b64 %gs63, %r1;"}, local: []string{"st.local.u64 [stk+496], %r1;"}},
		{name: "array-key", insns: []asm.Instruction{
			stImm(fp, -4, 1, asm.Word),
			asm.LoadMapPtr(asm.R1, 0).WithReference("arr"), asm.Mov.Reg(asm.R2, fp), asm.Add.Imm(asm.R2, -4),
			asm.FnMapLookupElem.Call(), asm.Return()},
			regs: []string{"bfi.b64 %gs63, %t0, %gs63, 32, 32;", "bfe.u64 %gsx, %gs63, 32, 32;"}},
		{name: "pointer-across-a-label", insns: []asm.Instruction{
			asm.Mov.Reg(asm.R6, fp), asm.Add.Imm(asm.R6, -8), asm.JEq.Imm(asm.R1, 0, "l"), asm.Mov.Imm(asm.R1, 3),
			st(asm.R6, 0, asm.R1, asm.DWord).WithSymbol("l"), asm.LoadMem(asm.R0, asm.R6, 0, asm.DWord), asm.Return()},
			regs: []string{"mov.b64 %gs63, %r1;", "mov.b64 %r0, %gs63;"}},
		{name: "offsets-joined", insns: []asm.Instruction{
			asm.Mov.Reg(asm.R6, fp), asm.Add.Imm(asm.R6, -8), asm.JEq.Imm(asm.R1, 0, "l"), asm.Add.Imm(asm.R6, -8),
			st(asm.R6, 0, asm.R1, asm.DWord).WithSymbol("l"), asm.LoadMem(asm.R0, fp, -8, asm.DWord), asm.Return()},
			none: true},
		{name: "variable-offset", insns: []asm.Instruction{
			st(fp, -8, asm.R1, asm.DWord), asm.Mov.Reg(asm.R6, fp), asm.Add.Reg(asm.R6, asm.R2),
			asm.LoadMem(asm.R0, asm.R6, 0, asm.Byte), asm.Return()},
			none: true},
		{name: "pointer-stored", insns: []asm.Instruction{
			st(fp, -8, asm.R1, asm.DWord), asm.Mov.Reg(asm.R6, fp), asm.Add.Imm(asm.R6, -8),
			asm.LoadMapValue(asm.R2, 0, 0).WithReference("arr"), st(asm.R2, 0, asm.R6, asm.DWord), asm.Return()},
			none: true},
		{name: "subprogram-argument", insns: []asm.Instruction{
			st(fp, -8, asm.R1, asm.DWord), asm.Mov.Reg(asm.R1, fp), asm.Add.Imm(asm.R1, -16),
			asm.Call.Label("sub"), asm.Return(),
			asm.LoadMem(asm.R0, asm.R1, 8, asm.DWord).WithSymbol("sub"), asm.Return()},
			none: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, err := Compile(prog(c.insns...), testOpts())
			if err != nil {
				t.Fatal(err)
			}
			main := f.PTX[strings.Index(f.PTX, ".visible .func"):]
			// The frame holds the bytes that stay in memory, from the
			// lowest to the top (16-byte aligned), and none where all
			// live in registers; accesses are rebased to it.
			frame := 0
			if m := regexp.MustCompile(`\.b8 stk\[(\d+)\]`).FindStringSubmatch(main); m != nil {
				frame, _ = strconv.Atoi(m[1])
			}
			wantFrame := map[bool]int{true: StackSize, false: 0}[c.none]
			if len(c.local) > 0 {
				wantFrame = 16
			}
			if frame != wantFrame {
				t.Errorf("stack frame of %d bytes, want %d", frame, wantFrame)
			}
			rebase := func(w string) string {
				return regexp.MustCompile(`\[stk\+(\d+)\]`).ReplaceAllStringFunc(w, func(r string) string {
					n, _ := strconv.Atoi(r[5 : len(r)-1])
					return fmt.Sprintf("[stk+%d]", n-(StackSize-frame))
				})
			}
			for _, w := range c.regs {
				if !strings.Contains(main, w) {
					t.Errorf("lacks %q", w)
				}
			}
			for _, w := range c.local {
				if w = rebase(w); !strings.Contains(main, w) {
					t.Errorf("lacks %q (the slot must stay in memory)", w)
				}
			}
			if c.none && strings.Contains(main, "%gs") {
				t.Errorf("a slot in a register, though a stack pointer's offset is lost or escapes")
			}
			if !c.none && len(c.regs) > 0 && !strings.Contains(main, ".reg .b64 %gs<64>;") {
				t.Errorf("slot registers not declared")
			}
			if t.Failed() {
				t.Logf("PTX:\n%s", numbered(f.PTX))
			}
			assemble(t, f)
		})
	}
}

// TestReadOnlyFold: loads from read-only global data (Options.Constants) at
// offsets the compiler follows become immediates; others stay loads.
func TestReadOnlyFold(t *testing.T) {
	data := make([]byte, 16)
	for i := range data {
		data[i] = byte(i + 1)
	}
	opts := testOpts()
	opts.Constants = map[string][]byte{"arr": data}
	p := prog(
		asm.LoadMapValue(asm.R1, 0, 4).WithReference("arr"),
		asm.LoadMem(asm.R0, asm.R1, 0, asm.Word), // bytes 4..7
		asm.Mov.Reg(asm.R2, asm.R1),
		asm.Add.Imm(asm.R2, 4),
		asm.LoadMem(asm.R3, asm.R2, 2, asm.Half),   // bytes 10..11
		asm.LoadMem(asm.R4, asm.R1, 12, asm.DWord), // past the data: a load
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.Mov.Reg(asm.R9, asm.R1),
		asm.FnKtimeGetNs.Call(),
		asm.LoadMem(asm.R7, asm.R6, 1, asm.Byte), // byte 5, r6 survives the call
		asm.JEq.Imm(asm.R7, 0, "out"),
		asm.Mov.Reg(asm.R6, asm.R0), // one path only: r6 is unknown at the join
		asm.LoadMem(asm.R8, asm.R6, 0, asm.Word).WithSymbol("out"),
		asm.LoadMem(asm.R5, asm.R9, 8, asm.Word), // both paths agree on r9: bytes 12..15
		asm.Return(),
	)
	f, err := Compile(p, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"mov.u64 %r0, " + imm64(0x08070605) + ";",
		"mov.u64 %r3, " + imm64(0x0c0b) + ";",
		"mov.u64 %r7, " + imm64(0x06) + ";",
		"mov.u64 %r5, " + imm64(0x100f0e0d) + ";",
		"ld.u64 %r4,",
		"ld.u32 %r8,",
	} {
		if !strings.Contains(f.PTX, want) {
			t.Errorf("PTX lacks %q:\n%s", want, f.PTX)
		}
	}
	for _, not := range []string{"ld.u32 %r0,", "ld.u16 %r3,", "ld.u8 %r7,", "ld.u32 %r5,"} {
		if strings.Contains(f.PTX, not) {
			t.Errorf("PTX still loads %q", not)
		}
	}
	assemble(t, f)
	// without the contents every load stays
	g, err := Compile(p, testOpts())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(g.PTX, imm64(0x08070605)) || !strings.Contains(g.PTX, "ld.u32 %r0,") {
		t.Errorf("folded without Options.Constants:\n%s", g.PTX)
	}
}

// TestLoopBudget: with Options.LoopBudget every loop head (a jump back to
// it), in the entry function and in a subprogram, counts and, past the
// budget, returns 0 from its function after one add to the trace_printk
// ring's budget word; straight code gets none, a program without the
// option neither; the module assembles (the inlined entry too).
func TestLoopBudget(t *testing.T) {
	insns := asm.Instructions{
		asm.Mov.Imm(asm.R6, 0),
		asm.Add.Imm(asm.R6, 1).WithSymbol("head"),
		asm.JLT.Reg(asm.R6, asm.R1, "head"),
		asm.Call.Label("spin"),
		asm.Return(),
		asm.Mov.Imm(asm.R0, 0).WithSymbol("spin"),
		asm.Add.Imm(asm.R0, 1).WithSymbol("again"),
		asm.Ja.Label("again"),
	}
	opts := testOpts()
	opts.LoopBudget = 4096
	f, err := Compile(prog(insns...), opts)
	if err != nil {
		t.Fatal(err)
	}
	word := fmt.Sprintf("mov.u64 %%t7, 0x%X;\n\tred.global.add.u64 [%%t7], 1;\n\tmov.u64 %%r0, 0;\n\tst.param.b64 [ret], %%r0;\n\tret;", testPrintk.Addr+gpumap.OffBudget)
	if n := strings.Count(f.PTX, "setp.gt.u64 %plb, %lb, 4096;"); n != 2 {
		t.Errorf("%d budget checks, want one per loop head (2):\n%s", n, f.PTX)
	}
	if n := strings.Count(f.PTX, word); n != 2 {
		t.Errorf("%d budget exits, want one per function with a loop (2):\n%s", n, f.PTX)
	}
	// the check sits at the head, where the back edge lands
	if !strings.Contains(f.PTX, "$L1:\n\tadd.u64 %lb, %lb, 1;") || !strings.Contains(f.PTX, "$L6:\n\tadd.u64 %lb, %lb, 1;") {
		t.Errorf("the checks are not at the loop heads:\n%s", f.PTX)
	}
	assemble(t, f)
	if body := f.inlineBody("%rd1", "", "u0"); !strings.Contains(body, "bra.uni $u0_exit;") || strings.Contains(body, "\tret;\n\t}") {
		t.Errorf("the inlined entry keeps a ret at its budget exit:\n%s", body)
	}

	plain, err := Compile(prog(insns...), testOpts())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(plain.PTX, "%lb") {
		t.Errorf("a budget without LoopBudget:\n%s", plain.PTX)
	}
	straight, err := Compile(prog(asm.Mov.Imm(asm.R0, 1), asm.Return()), opts)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(straight.PTX, "%lb") {
		t.Errorf("a budget on straight code:\n%s", straight.PTX)
	}
}

// --no-drop: the reservation's full path reads the ring's wait bound from
// its control block and, only with one set, sleeps and looks again,
// counting the warps that waited and those that gave up (gpumap's
// offsets); the path with room is the same either way (no load of the
// bound before a claim).
func TestRingWaitPath(t *testing.T) {
	src := runtimeFunc("__gpubpf_rb_reserve", "")
	for _, want := range []string{
		fmt.Sprintf("ld.relaxed.gpu.u32 %%b13, [%%a0+%d];", gpumap.OffWaitBound),
		fmt.Sprintf("red.relaxed.gpu.add.u64 [%%a0+%d], 1;", gpumap.OffWaits),
		fmt.Sprintf("red.relaxed.gpu.add.u64 [%%a0+%d], 1;", gpumap.OffWaitDrops),
		"nanosleep.u32", "%globaltimer", "bra.uni $CLAIM;",
	} {
		if !strings.Contains(src, want) {
			t.Errorf("no %q in the reservation:\n%s", want, src)
		}
	}
	bound := strings.Index(src, fmt.Sprintf("[%%a0+%d]", gpumap.OffWaitBound))
	if claim := strings.Index(src, "atom.relaxed.gpu.add.u64 %a9, [%a0+192]"); claim < 0 || bound < claim {
		t.Errorf("the wait bound is loaded before the claim (at %d, claim at %d)", bound, claim)
	}
	for _, w := range []string{"WAITBOUND", "WAITS", "WAITDROPS"} {
		if strings.Contains(src, w) {
			t.Errorf("placeholder %s left in the reservation", w)
		}
	}
}
