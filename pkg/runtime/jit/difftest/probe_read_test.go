package difftest

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/gpubpf/gpubpf/internal/testenv"
	"github.com/gpubpf/gpubpf/pkg/runtime/jit"
)

// Helper numbers of the probe_read family a socket filter may call in the
// kernel (bpf_probe_read, 4, and bpf_probe_read_str, 45, are for tracing
// programs only; the GPU treats them as the _kernel forms).
const (
	fnReadUser   = asm.BuiltinFunc(112)
	fnReadKernel = asm.BuiltinFunc(113)
	fnUserStr    = asm.BuiltinFunc(114)
	fnKernelStr  = asm.BuiltinFunc(115)
)

// fill puts a pattern with no zero byte in the n bytes below r10+top, so a
// byte the helper left alone shows.
func fill(top int16, n int) asm.Instructions {
	var is asm.Instructions
	for o := top - 8; o >= top-int16(n); o -= 8 {
		is = append(is, asm.Instruction{OpCode: asm.StoreImmOp(asm.DWord), Dst: asm.RFP, Offset: o, Constant: -0x5a5a5a5b})
	}
	return is
}

// readCall calls fn(r10+dst, size, src) with src in r3 already.
func readCall(fn asm.BuiltinFunc, dst int16, size int32) asm.Instructions {
	return asm.Instructions{asm.Mov.Reg(asm.R1, asm.RFP), asm.Add.Imm(asm.R1, int32(dst)), asm.Mov.Imm(asm.R2, size), fn.Call()}
}

// keep stores r0 (or, when sign, only whether it is negative: the kernel
// answers -ERANGE where the GPU answers -EFAULT for a kernel read of the
// first page on x86) and the 16 bytes at r10+dst into res slots from slot.
func keep(slot int16, sign bool, dst int16) asm.Instructions {
	var is asm.Instructions
	if sign {
		is = append(is, asm.ArSh.Imm(asm.R0, 63))
	}
	return append(is,
		asm.StoreMem(asm.R6, 8*slot, asm.R0, asm.DWord),
		asm.LoadMem(asm.R1, asm.RFP, dst, asm.DWord), asm.StoreMem(asm.R6, 8*slot+8, asm.R1, asm.DWord),
		asm.LoadMem(asm.R1, asm.RFP, dst+8, asm.DWord), asm.StoreMem(asm.R6, 8*slot+16, asm.R1, asm.DWord))
}

func strOnStack(at int16, s string) asm.Instructions {
	b := make([]byte, (len(s)+1+7)/8*8)
	for i := range b {
		b[i] = 0xaa
	}
	copy(b, s)
	b[len(s)] = 0
	var is asm.Instructions
	for o := 0; o < len(b); o += 8 {
		is = append(is, asm.LoadImm(asm.R1, int64(binary.LittleEndian.Uint64(b[o:])), asm.DWord), asm.StoreMem(asm.RFP, at+int16(o), asm.R1, asm.DWord))
	}
	return is
}

// probeReadProgs are fixed programs for the probe_read helpers whose
// outcome is the same in the kernel and on the GPU: copies from a map value
// and from the stack (aligned and not), strings cut at every length, and
// the first page.
func probeReadProgs() []asm.Instructions {
	head := asm.Instructions{asm.LoadMapValue(asm.R6, 0, 0).WithReference("res")}
	end := asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}
	var progs []asm.Instructions
	// Copies: all four data values (32 bytes, 8-byte words), then 13
	// bytes from an odd stack address (bytes).
	progs = append(progs, cat(head, fill(0, 64),
		// &data[0] (direct value addressing is for 1-entry arrays only).
		asm.Instructions{
			asm.Instruction{OpCode: asm.StoreImmOp(asm.DWord), Dst: asm.RFP, Offset: -104, Constant: 0},
			asm.LoadMapPtr(asm.R1, 0).WithReference("data"), asm.Mov.Reg(asm.R2, asm.RFP), asm.Add.Imm(asm.R2, -104),
			asm.FnMapLookupElem.Call(), asm.Mov.Reg(asm.R3, asm.R0),
		}, readCall(fnReadKernel, -48, 32),
		keep(0, false, -48), keep(3, false, -32),
		asm.Instructions{asm.Mov.Reg(asm.R3, asm.RFP), asm.Add.Imm(asm.R3, -45)}, readCall(fnReadKernel, -64, 13),
		keep(6, false, -64), end))
	// The first page: dst zeroed, an error (exactly -EFAULT for user
	// reads, as in Linux), and 0 for a string read of size 0.
	progs = append(progs, cat(head,
		fill(0, 16), asm.Instructions{asm.Mov.Imm(asm.R3, 0)}, readCall(fnReadKernel, -16, 16), keep(0, true, -16),
		fill(0, 16), asm.Instructions{asm.Mov.Imm(asm.R3, 16)}, readCall(fnReadUser, -16, 16), keep(3, false, -16),
		fill(0, 16), asm.Instructions{asm.Mov.Imm(asm.R3, 0)}, readCall(fnUserStr, -16, 16), keep(6, false, -16),
		fill(0, 16), asm.Instructions{asm.Mov.Imm(asm.R3, 8)}, readCall(fnKernelStr, -16, 16), keep(9, true, -16),
		fill(0, 16), asm.Instructions{asm.Mov.Imm(asm.R3, 0)}, readCall(fnKernelStr, -16, 0), keep(12, false, -16),
		end))
	// Strings from the stack: whole, exactly fitting, cut, size 1.
	for _, group := range [][]struct {
		long bool
		size int32
	}{{{false, 16}, {false, 6}, {false, 5}}, {{false, 1}, {true, 4}, {true, 16}}, {{true, 21}, {true, 22}, {true, 2}}} {
		p := cat(head, strOnStack(-8, "hello"), strOnStack(-40, "0123456789abcdefghij"))
		for i, c := range group {
			src := int32(-8)
			if c.long {
				src = -40
			}
			p = cat(p, fill(-56, 32), asm.Instructions{asm.Mov.Reg(asm.R3, asm.RFP), asm.Add.Imm(asm.R3, src)},
				readCall(fnKernelStr, -88, c.size), keep(int16(3*i), false, -88))
		}
		progs = append(progs, cat(p, end))
	}
	// Reads of 1, 2, 4 and 8 bytes (the compiler loads these itself where
	// the destination is aligned to the size): from a map value, from
	// unaligned stack addresses, to an unaligned destination (the
	// runtime's copy), and from the first page.
	lookup := asm.Instructions{
		asm.Instruction{OpCode: asm.StoreImmOp(asm.DWord), Dst: asm.RFP, Offset: -128, Constant: 0},
		asm.LoadMapPtr(asm.R1, 0).WithReference("data"), asm.Mov.Reg(asm.R2, asm.RFP), asm.Add.Imm(asm.R2, -128),
		asm.FnMapLookupElem.Call(), asm.JNE.Imm(asm.R0, 0, "found"), asm.Mov.Imm(asm.R0, 0), asm.Return(),
		asm.Mov.Reg(asm.R7, asm.R0).WithSymbol("found"),
	}
	from := func(r asm.Register, off int32) asm.Instructions {
		return asm.Instructions{asm.Mov.Reg(asm.R3, r), asm.Add.Imm(asm.R3, off)}
	}
	progs = append(progs, cat(head, fill(0, 120), strOnStack(-40, "0123456789abcdefghij"), lookup,
		from(asm.R7, 0), readCall(fnReadKernel, -56, 8), keep(0, false, -56),
		from(asm.R7, 4), readCall(fnReadKernel, -68, 4), keep(3, false, -72),
		from(asm.RFP, -37), readCall(fnReadKernel, -85, 2), keep(6, false, -88),
		from(asm.RFP, -39), readCall(fnReadKernel, -104, 8), keep(9, false, -104),
		asm.Instructions{asm.Mov.Imm(asm.R3, 8)}, readCall(fnReadUser, -120, 8), keep(12, false, -120),
		end))
	progs = append(progs, cat(head, fill(0, 96), strOnStack(-40, "0123456789abcdefghij"),
		from(asm.RFP, -33), readCall(fnReadKernel, -51, 1), keep(0, false, -56),
		from(asm.RFP, -36), readCall(fnReadKernel, -62, 2), keep(3, false, -64),
		from(asm.RFP, -35), readCall(fnReadKernel, -76, 2), keep(6, false, -80),
		from(asm.RFP, -38), readCall(fnReadKernel, -92, 4), keep(9, false, -96),
		asm.Instructions{asm.Mov.Imm(asm.R3, 16)}, readCall(fnReadKernel, -92, 4), keep(12, true, -96),
		end))
	return progs
}

// TestProbeRead runs the probe_read programs in the kernel and, with the
// GPU harness, on the GPU, and compares; without a GPU it checks the
// kernel side's expectations and assembles the module.
func TestProbeRead(t *testing.T) {
	testenv.Root(t)
	progs := probeReadProgs()
	k, err := newKernelRunner()
	if err != nil {
		t.Fatal(err)
	}
	defer k.close()
	want := make([]*outcome, len(progs))
	for i, p := range progs {
		if want[i], err = k.run(int64(i+1), p); err != nil {
			t.Fatalf("program %d: %v", i, err)
		}
	}
	slot := func(o *outcome, s int) uint64 { return binary.LittleEndian.Uint64(o.res[8*s:]) }
	pat := uint64(0xffffffffa5a5a5a5)
	// What Linux does, so that a kernel that changed shows here first.
	for _, c := range []struct {
		prog, slot int
		want       uint64
	}{
		{0, 0, 0}, {0, 1, DataInit(1, 0)}, {0, 5, DataInit(1, 3)}, {0, 6, 0},
		{1, 0, ^uint64(0)}, {1, 1, 0}, {1, 2, 0}, {1, 3, uint64(0xfffffffffffffff2)}, {1, 6, uint64(0xfffffffffffffff2)}, {1, 9, ^uint64(0)}, {1, 12, 0}, {1, 13, pat},
		{2, 0, 6}, {2, 1, 0xffff000000000000 | binary.LittleEndian.Uint64([]byte("hello\x00\x00\x00"))}, {2, 2, pat},
		{2, 6, 5}, {2, 7, 0xffffff0000000000 | binary.LittleEndian.Uint64([]byte("hell\x00\x00\x00\x00"))},
		{3, 0, 1}, {3, 3, 4}, {3, 6, 16}, {4, 0, 21}, {4, 3, 21}, {4, 6, 2},
	} {
		if got := slot(want[c.prog], c.slot); got != c.want {
			t.Errorf("kernel: program %d slot %d = %#x, want %#x", c.prog, c.slot, got, c.want)
		}
	}
	fns := make([]*jit.Function, len(progs))
	rets := make([]uint64, len(progs))
	h := startHarness(t, uint64(len(progs)*region))
	base := uint64(0x7f0000000000)
	if h != nil {
		base = h.addr
	}
	img := make([]byte, 0, len(progs)*region)
	for i, p := range progs {
		rb := base + uint64(i*region)
		f, err := jit.Compile(&ebpf.ProgramSpec{Name: fmt.Sprintf("pr%d", i), Instructions: p}, jit.Options{Maps: placements(rb), FuncName: fmt.Sprintf("pr_%d", i)})
		if err != nil {
			t.Fatalf("program %d: %v", i, err)
		}
		fns[i], rets[i] = f, rb+offRet
		img = append(img, gpuImage(rb, int64(i+1))...)
	}
	mod := module(fns, rets)
	if h == nil {
		assembleSample(t, mod)
		t.Log("no GPU harness (GPUBPF_DIFFTEST_HARNESS): kernel side and ptxas only")
		return
	}
	out, line, err := h.run(mod, img, len(progs), 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("harness: %s", line)
	for i := range progs {
		if got := gpuOutcome(out[i*region:(i+1)*region], base+uint64(i*region)); !got.equal(want[i]) {
			t.Errorf("program %d differs:\nkernel %v\ngpu    %v\n%v", i, want[i], got, progs[i])
		}
	}
}
