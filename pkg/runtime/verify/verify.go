// Package verify checks GPU programs with the Linux kernel's own verifier
// before they are compiled for the GPU.
//
// A GPU program cannot be loaded into the kernel as it is: it calls GPU
// helpers (501-511, 600+), uses GPU map types (1501-1527) and its ctx is a
// copy of a CUDA kernel's parameters. So each program gets a CPU twin that
// the kernel can load (BPF_PROG_LOAD, type kprobe) and that the kernel's
// rules judge exactly as they would judge the GPU program:
//
//   - ctx becomes a pointer to a map value of jit.CtxMax bytes (the twin
//     starts with r1 = &ctx_value), so ctx reads are bounds-checked;
//   - every GPU helper becomes a kernel helper, or a short instruction
//     sequence, with the same arguments and result: a helper that writes
//     through its pointer arguments becomes 8-byte stores through them;
//   - every GPU map becomes a kernel map of the same key and value shape
//     (arrays, hashes, ring buffers), so lookups must be NULL-checked and
//     value accesses stay in bounds;
//   - the twin is loaded with BPF_F_STRICT_ALIGNMENT: a misaligned access
//     that x86 forgives faults on the GPU.
//
// The kernel then enforces bounded execution, stack bounds, map value
// bounds, NULL checks and helper argument types. A refused program never
// reaches the JIT; the error names the program, the instruction, the
// source line and the kernel's reason in plain words. Pointer leaks into
// maps are refused by a pass of this package (see leaks.go): the kernel
// checks them only for unprivileged loads, which would refuse programs the
// GPU runs safely.
package verify

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"

	"github.com/gpubpf/gpubpf/pkg/runtime/gpumap"
	"github.com/gpubpf/gpubpf/pkg/runtime/jit"
)

// ctxMap is the twin's stand-in for the GPU ctx, ctxBytes its size.
const (
	ctxMap   = "gpubpf_ctx"
	ctxBytes = jit.CtxMax
)

// bpfFStrictAlignment is BPF_F_STRICT_ALIGNMENT.
const bpfFStrictAlignment = 1 << 0

// twinRingBytes is the size of a twin ring buffer: the verifier does not
// compare reservations with it, so the smallest legal size will do.
const twinRingBytes = 4096

// ErrPrivileges is wrapped when the kernel would not load the twin
// because the caller lacks CAP_BPF/CAP_PERFMON.
var ErrPrivileges = errors.New("checking GPU programs with the kernel's verifier needs root (CAP_BPF and CAP_PERFMON)")

// Error is a GPU program the kernel's verifier refused.
type Error struct {
	Program, Section string
	// Insn is the instruction's index in the program (-1: not tied to one).
	Insn int
	// Source is "file:line: text" of the instruction ("" without BTF line
	// info).
	Source string
	// Reason is the kernel's message, Explain what it means for the
	// program and what to do.
	Reason, Explain string
	// Log is the verifier's whole log.
	Log []string
	// ByKernel is set when the kernel's verifier refused it (not one of
	// this package's own checks).
	ByKernel bool
	// tooManyPaths: the kernel gave up on its pending branches (EFAULT).
	tooManyPaths bool
	// unlogged: a gave-up told by its errno alone, from a load without
	// the verifier's log (twin.load); loadLogged gives the reason and the
	// place.
	unlogged bool
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "GPU program %s (section %s) is refused as unsafe", e.Program, e.Section)
	if e.Insn >= 0 {
		fmt.Fprintf(&b, " at instruction %d", e.Insn)
	}
	if e.Source != "" {
		fmt.Fprintf(&b, " (%s)", e.Source)
	} else if e.Insn >= 0 {
		b.WriteString(" (compile with clang -g for the source line)")
	}
	fmt.Fprintf(&b, ": %s", e.Explain)
	by := "gpubpf's check"
	if e.ByKernel {
		by = "the kernel's verifier"
	}
	fmt.Fprintf(&b, " [%s: %s]", by, e.Reason)
	return b.String()
}

// A Check is one GPU program to verify and how it will run.
type Check struct {
	Spec *ebpf.ProgramSpec
	Options
	// Verdict is what Programs found for an accepted program.
	Verdict Verdict
}

// Verdict says how an accepted program must run.
type Verdict struct {
	// LoopBudget: the kernel's verifier proved the program's memory
	// accesses safe however many times its loops run, but not that they
	// end (their bounds come from data). As a probe it runs with the
	// GPU's iteration budget on its loop heads (jit.Options.LoopBudget):
	// a call of a function that spends it returns 0 there, the path the
	// verifier checked, and the probe's thread goes on with the
	// application's kernel.
	LoopBudget bool
}

// Programs verifies the GPU programs of spec that checks name, each on its
// own twin, and fills each accepted one's Verdict. It returns nil when the
// kernel accepts them all, and otherwise the errors joined (an *Error for
// each refused program).
func Programs(spec *ebpf.CollectionSpec, checks []Check) error {
	var errs []error
	for i, c := range checks {
		v, err := Judge(spec, c.Spec, c.Options)
		if err != nil {
			if errors.Is(err, ErrPrivileges) {
				return err
			}
			errs = append(errs, err)
		}
		checks[i].Verdict = v
	}
	return errors.Join(errs...)
}

// Options say how a GPU program will run.
type Options struct {
	// Direct: the program runs as a kernel of its own in gpubpf's
	// direct-run host (gpubpf run --direct), a process of its own that -d
	// ends. A loop whose bound comes from data (a map value: bpftime's GEMM
	// runs K times) is accepted there once the kernel's verifier has
	// proven its memory accesses safe for any number of iterations. A
	// probe runs inside the application's kernels and must end: there
	// such a loop runs with the GPU's iteration budget (Verdict.LoopBudget).
	Direct bool
}

// Program verifies one GPU program of spec as a probe.
func Program(spec *ebpf.CollectionSpec, p *ebpf.ProgramSpec) error {
	return ProgramWith(spec, p, Options{})
}

// ProgramWith verifies one GPU program of spec, run as opts say.
func ProgramWith(spec *ebpf.CollectionSpec, p *ebpf.ProgramSpec, opts Options) error {
	_, err := Judge(spec, p, opts)
	return err
}

// Judge verifies one GPU program of spec, run as opts say, and says how an
// accepted one must run.
func Judge(spec *ebpf.CollectionSpec, p *ebpf.ProgramSpec, opts Options) (Verdict, error) {
	if e := leak(spec, p); e != nil {
		return Verdict{}, e
	}
	tw, err := build(spec, p, false)
	if err != nil {
		return Verdict{}, err
	}
	err = tw.load()
	var e *Error
	if err == nil || !errors.As(err, &e) || !e.gaveUp() {
		return Verdict{}, err
	}
	// The verifier gave up on a loop. Checked again with a may_goto at
	// each loop head and every register the loop's body sets made an
	// unknown number there, so that the body's check converges for values
	// that stand for every iteration's: what it accepts is safe however
	// many times the loop runs.
	// A probe then runs with the GPU's iteration budget where the twin has
	// its may_goto: a thread never loops forever inside the application's
	// kernel. A direct run is a kernel of its own that -d ends.
	wide, werr := build(spec, p, true)
	if werr != nil || wide.load() != nil {
		if e.unlogged {
			return Verdict{}, tw.loadLogged() // refused: now the reason and where
		}
		return Verdict{}, err
	}
	return Verdict{LoopBudget: !opts.Direct}, nil
}

// gaveUp reports a refusal because the verifier gave up on the number of
// paths or instructions (a loop it cannot bound), not on an unsafe access.
func (e *Error) gaveUp() bool {
	return e.ByKernel && (e.tooManyPaths || tooLong.MatchString(e.Reason))
}

// load loads the twin into the kernel's verifier: nil, or why it refused.
// First without the verifier's log: on a loop it cannot bound the verifier
// runs to its million-instruction limit, and cilium then loads the program
// again with a log it grows each time, a full run each (20 s for a loop
// bounded by a map value, 2026-11-28, against 1 s). Giving up says E2BIG
// (or EFAULT) without a log; any other refusal is loaded again with it for
// the reason.
func (tw *twin) load() error {
	coll, err := ebpf.NewCollectionWithOptions(tw.spec, ebpf.CollectionOptions{Programs: ebpf.ProgramOptions{LogDisabled: true}})
	if err == nil {
		coll.Close()
		return nil
	}
	if errors.Is(err, unix.E2BIG) || errors.Is(err, unix.EFAULT) {
		p := tw.prog
		return &Error{Program: p.Name, Section: p.SectionName, Insn: -1, Reason: err.Error(), ByKernel: true, tooManyPaths: true, unlogged: true,
			Explain: "the verifier gave up: the program has too many paths or instructions to check (usually a loop it cannot bound)"}
	}
	return tw.loadLogged()
}

// loadLogged loads the twin with the verifier's log: nil, or why it
// refused, where.
func (tw *twin) loadLogged() error {
	p := tw.prog
	coll, err := ebpf.NewCollectionWithOptions(tw.spec, ebpf.CollectionOptions{})
	if err == nil {
		coll.Close()
		return nil
	}
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) {
		return tw.refusal(ve)
	}
	if errors.Is(err, unix.EFAULT) {
		// The kernel ends a search with too many pending branches ("the
		// sequence of N jumps is too complex") with EFAULT, and cilium
		// keeps no log for it.
		return &Error{Program: p.Name, Section: p.SectionName, Insn: -1, Reason: err.Error(), ByKernel: true, tooManyPaths: true,
			Explain: "the verifier gave up: the program has too many paths to check (usually a loop with branches inside, run many times); move the loop body into a global (non-static) __noinline function, which the verifier checks once, or give the loop a smaller constant bound"}
	}
	if errors.Is(err, os.ErrPermission) || errors.Is(err, ebpf.ErrNotSupported) && os.Geteuid() != 0 {
		return fmt.Errorf("GPU program %s: %w: run the tool with sudo", p.Name, ErrPrivileges)
	}
	return fmt.Errorf("GPU program %s (section %s): loading its CPU twin into the kernel's verifier: %w", p.Name, p.SectionName, err)
}

// twin is a program's CPU twin and the way back from its instructions to
// the program's.
type twin struct {
	prog *ebpf.ProgramSpec
	spec *ebpf.CollectionSpec
	// orig maps each raw instruction slot of the twin to the index of the
	// program's instruction it came from (-1: the ctx prologue).
	orig []int
}

// rewrite is the twin of one GPU helper call: the instructions replacing
// the call.
type rewrite func() asm.Instructions

var (
	// noArgs: the GPU helper takes no arguments and returns a number.
	noArgs = func() asm.Instructions { return asm.Instructions{asm.FnKtimeGetNs.Call()} }
	// writes3: the GPU helper writes a u64 through each of r1, r2, r3:
	// an unknown number (read from the ctx twin, whose contents the
	// verifier does not know), so nothing is learnt from what it wrote.
	writes3 = func() asm.Instructions {
		return asm.Instructions{
			asm.LoadMapValue(asm.R0, 0, 0).WithReference(ctxMap),
			asm.LoadMem(asm.R0, asm.R0, 0, asm.DWord),
			asm.StoreMem(asm.R1, 0, asm.R0, asm.DWord),
			asm.StoreMem(asm.R2, 0, asm.R0, asm.DWord),
			asm.StoreMem(asm.R3, 0, asm.R0, asm.DWord),
			asm.FnKtimeGetNs.Call(),
		}
	}
	same = func(fn asm.BuiltinFunc) rewrite {
		return func() asm.Instructions { return asm.Instructions{fn.Call()} }
	}
)

// fnPuts is bpftime's bpf_puts, which prints as trace_printk does.
const fnPuts asm.BuiltinFunc = 501

// gpuHelpers holds every helper the GPU compiler implements, with its twin.
var gpuHelpers = map[asm.BuiltinFunc]rewrite{
	asm.FnMapLookupElem:     same(asm.FnMapLookupElem),
	asm.FnMapUpdateElem:     same(asm.FnMapUpdateElem),
	asm.FnMapDeleteElem:     same(asm.FnMapDeleteElem),
	asm.FnKtimeGetNs:        same(asm.FnKtimeGetNs),
	asm.FnTracePrintk:       same(asm.FnTracePrintk),
	asm.FnGetPrandomU32:     same(asm.FnGetPrandomU32),
	asm.FnGetSmpProcessorId: same(asm.FnGetSmpProcessorId),
	asm.FnGetCurrentPidTgid: same(asm.FnGetCurrentPidTgid),
	asm.FnRingbufOutput:     same(asm.FnRingbufOutput),
	asm.FnRingbufReserve:    same(asm.FnRingbufReserve),
	asm.FnRingbufSubmit:     same(asm.FnRingbufSubmit),
	asm.FnRingbufDiscard:    same(asm.FnRingbufDiscard),
	// bpf_probe_read and its _str form are the _kernel ones on the GPU
	// (one address space), and may be missing from the kernel's kprobe
	// helpers on some architectures.
	asm.FnProbeRead:          same(asm.FnProbeReadKernel),
	asm.FnProbeReadStr:       same(asm.FnProbeReadKernelStr),
	asm.FnProbeReadUser:      same(asm.FnProbeReadUser),
	asm.FnProbeReadKernel:    same(asm.FnProbeReadKernel),
	asm.FnProbeReadUserStr:   same(asm.FnProbeReadUserStr),
	asm.FnProbeReadKernelStr: same(asm.FnProbeReadKernelStr),
	// bpf_perf_event_output(ctx, map, flags, data, size) writes to a GPU
	// ring: bpf_ringbuf_output(map, data, size, 0). Its ctx argument is
	// not used on the GPU.
	asm.FnPerfEventOutput: func() asm.Instructions {
		return asm.Instructions{
			asm.Mov.Reg(asm.R1, asm.R2),
			asm.Mov.Reg(asm.R2, asm.R4),
			asm.Mov.Reg(asm.R3, asm.R5),
			asm.Mov.Imm(asm.R4, 0),
			asm.FnRingbufOutput.Call(),
		}
	},
	// bpf_puts(str): a string the GPU reads up to its NUL.
	fnPuts: func() asm.Instructions {
		return asm.Instructions{asm.Mov.Imm(asm.R2, 1), asm.FnTracePrintk.Call()}
	},
	502: noArgs,  // bpf_get_globaltimer
	503: writes3, // bpf_get_block_idx(x, y, z)
	504: writes3, // bpf_get_block_dim
	505: writes3, // bpf_get_thread_idx
	506: noArgs,  // bpf_gpu_membar
	507: noArgs,  // bpf_gpu_exit: the code after it is checked as if it ran
	508: writes3, // bpf_get_grid_dim
	509: noArgs,  // bpf_get_sm_id
	510: noArgs,  // bpf_get_warp_id
	511: noArgs,  // bpf_get_lane_id
	600: noArgs,  // bpf_gpu_kernel_index
	601: noArgs,  // bpf_gpu_grid_id
	602: noArgs,  // bpf_gpu_active_mask
	// bpf_gpu_shfl(value, lane, mask): another lane's value, so a pointer
	// stays a pointer of the same kind.
	603: func() asm.Instructions {
		return asm.Instructions{asm.Mov.Reg(asm.R0, asm.R3), asm.Mov.Reg(asm.R0, asm.R2), asm.Mov.Reg(asm.R0, asm.R1)}
	},
	604: noArgs, // bpf_gpu_site_time
	// bpf_gpu_launch_word(i): i must be set.
	605: func() asm.Instructions {
		return asm.Instructions{asm.Mov.Reg(asm.R0, asm.R1), asm.FnKtimeGetNs.Call()}
	},
	606: noArgs, // bpf_gpu_thread_id
	607: noArgs, // bpf_gpu_entry_time
	// bpf_gpu_atomic_max(p, v): reads and writes the 8 bytes at p (which
	// must be memory the program may write) and returns a number.
	608: func() asm.Instructions {
		return asm.Instructions{
			asm.LoadMem(asm.R0, asm.R1, 0, asm.DWord),
			asm.StoreMem(asm.R1, 0, asm.R2, asm.DWord),
			asm.FnKtimeGetNs.Call(),
		}
	},
}

// GPUHelper reports whether the GPU compiler implements helper id.
func GPUHelper(id asm.BuiltinFunc) bool { return gpuHelpers[id] != nil }

// build makes p's twin; widen: at the head of each loop, every register
// the loop's body sets becomes an unknown number (widened).
func build(spec *ebpf.CollectionSpec, p *ebpf.ProgramSpec, widen bool) (*twin, error) {
	tw := &twin{prog: p}
	var heads map[int][]asm.Register
	if widen {
		heads = loopHeads(p.Instructions)
	}
	insns := make(asm.Instructions, 0, len(p.Instructions)+8)
	// newAt[i] is the twin's raw offset of program instruction i, last[i]
	// its last twin; oldRaw and oldAt the program's own offsets, to
	// retarget jumps.
	newAt := make([]int, len(p.Instructions)+1)
	last := make([]int, len(p.Instructions))
	oldRaw, oldAt := offsets(p.Instructions)
	newRaw := 0
	emit := func(ins asm.Instruction, from int) {
		insns = append(insns, ins)
		for k := 0; k < int(ins.Size()/asm.InstructionSize); k++ {
			tw.orig = append(tw.orig, from)
		}
		newRaw += int(ins.Size() / asm.InstructionSize)
	}
	for i, ins := range p.Instructions {
		newAt[i] = newRaw
		if i == 0 {
			// ctx: a map value of jit.CtxMax bytes. The prologue takes
			// over the first instruction's symbol and function info, so
			// the program (and its BTF) still starts at offset 0.
			pro := asm.LoadMapValue(asm.R1, 0, 0).WithReference(ctxMap).WithSymbol(ins.Symbol()).WithSource(ins.Source())
			if fn := btf.FuncMetadata(&ins); fn != nil {
				pro = btf.WithFuncMetadata(pro, fn)
			}
			emit(pro, -1)
			newAt[0] = newRaw
			ins = stripEntry(ins)
		}
		// Jumps to the head land here (newAt[i] is before it), the loop's
		// back edge too. A may_goto (kernel 6.9) leaves the loop once the
		// kernel's iteration budget is spent, as the GPU's budget would:
		// the verifier then checks the body until its state stops
		// changing instead of once per iteration, and the widening makes
		// it stop: every register the body sets is an unknown number (the
		// ctx twin's content, which the verifier does not know) at the
		// head.
		if rs, ok := heads[i]; ok {
			emit(asm.Instruction{OpCode: mayGoto, Offset: 1}, i)                  // spent: to the exit below
			emit(asm.Instruction{OpCode: asm.Ja.Op(asm.ImmSource), Offset: 2}, i) // else: the widening
			emit(asm.Mov.Imm(asm.R0, 0), i)
			emit(asm.Return(), i)
			for _, r := range rs {
				emit(asm.LoadMapValue(r, 0, 0).WithReference(ctxMap), i)
				emit(asm.LoadMem(r, r, 0, asm.DWord), i)
			}
		}
		if ins.IsBuiltinCall() {
			id := asm.BuiltinFunc(ins.Constant)
			rw := gpuHelpers[id]
			if rw == nil {
				return nil, &Error{Program: p.Name, Section: p.SectionName, Insn: i, Source: jit.SourceLine(p.Instructions, i),
					Reason:  fmt.Sprintf("call to helper %d", id),
					Explain: fmt.Sprintf("it calls %s, which GPU programs cannot call; see bpf/gpu.h for the helpers a GPU program has", helperName(id))}
			}
			seq := rw()
			for k, s := range seq {
				if k == 0 {
					// The call's symbol, function and line info go to
					// the first of its twins, with that twin's own map.
					ref := s.Reference()
					s = s.WithMetadata(ins.Metadata)
					if ref != "" {
						s = s.WithReference(ref)
					}
				}
				emit(s, i)
			}
			last[i] = len(insns) - 1
			continue
		}
		emit(ins, i)
		last[i] = len(insns) - 1
	}
	newAt[len(p.Instructions)] = newRaw
	// Retarget jumps: offsets are relative and instructions moved. A jump
	// is never rewritten, so it is the last twin instruction of its own.
	for i, ins := range p.Instructions {
		if !isJump(ins) {
			continue
		}
		target, ok := oldRaw[oldAt[i]+1+jumpOffset(ins)]
		if !ok {
			return nil, fmt.Errorf("GPU program %s: instruction %d jumps into the middle of an instruction", p.Name, i)
		}
		if err := setJumpOffset(&insns[last[i]], newAt[target]-(newAt[i]+1)); err != nil {
			return nil, fmt.Errorf("GPU program %s: instruction %d: %w", p.Name, i, err)
		}
	}

	t := p.Copy()
	t.Instructions = insns
	t.Type = ebpf.Kprobe
	t.AttachType = 0
	t.AttachTo = ""
	t.Flags |= bpfFStrictAlignment
	// The GPU program never runs in the kernel, so the kernel's GPL-only
	// helpers (probe_read, trace_printk) must not refuse it for its license.
	t.License = "GPL"
	tw.spec = &ebpf.CollectionSpec{
		Maps:      map[string]*ebpf.MapSpec{ctxMap: {Name: ctxMap, Type: ebpf.Array, KeySize: 4, ValueSize: ctxBytes, MaxEntries: 1}},
		Programs:  map[string]*ebpf.ProgramSpec{p.Name: t},
		Types:     spec.Types,
		ByteOrder: spec.ByteOrder,
	}
	for _, name := range ReferencedMaps(p) {
		ms := spec.Maps[name]
		if ms == nil {
			return nil, fmt.Errorf("GPU program %s uses map %s, which the object does not define", p.Name, name)
		}
		m, err := twinMap(p, ms)
		if err != nil {
			return nil, err
		}
		tw.spec.Maps[name] = m
	}
	return tw, nil
}

// mayGoto is BPF_JMP | BPF_JCOND | BPF_K with src BPF_MAY_GOTO (0): a
// conditional jump the kernel takes once a loop's iteration budget is
// spent.
const mayGoto = asm.OpCode(0xe5)

// loopHeads finds the loops of insns by the compiler's rule (jit.LoopHeads:
// a jump back to an instruction at or before it, not a function's start)
// and, for each head, the registers that an instruction of the loop's body
// sets (not through a call, whose scratch registers the verifier makes
// unreadable anyway). Widening a register to an unknown number can only
// lose what the verifier knows: a pointer becomes a number it refuses to
// dereference, a number any value, so what it accepts stays safe. A
// program whose jumps do not resolve has none (the kernel refuses it).
func loopHeads(insns asm.Instructions) map[int][]asm.Register {
	back, err := jit.LoopHeads(insns)
	if err != nil {
		return nil
	}
	heads := map[int][]asm.Register{}
	for t, jumps := range back {
		set := map[asm.Register]bool{}
		for _, i := range jumps {
			for k := t; k <= i; k++ {
				if r, ok := setsRegister(insns[k]); ok {
					set[r] = true
				}
			}
		}
		for r := asm.R0; r < asm.R10; r++ {
			if set[r] {
				heads[t] = append(heads[t], r)
			}
		}
	}
	return heads
}

// setsRegister is the register an ALU operation or a load sets.
func setsRegister(ins asm.Instruction) (asm.Register, bool) {
	switch c := ins.OpCode.Class(); {
	case c.IsALU(), c == asm.LdXClass, c == asm.LdClass:
		return ins.Dst, ins.Dst != asm.R10
	}
	return 0, false
}

// stripEntry returns ins without the symbol and function info the
// prologue took over.
func stripEntry(ins asm.Instruction) asm.Instruction {
	out := asm.Instruction{OpCode: ins.OpCode, Dst: ins.Dst, Src: ins.Src, Offset: ins.Offset, Constant: ins.Constant}
	if s := ins.Source(); s != nil {
		out = out.WithSource(s)
	}
	if r := ins.Reference(); r != "" {
		out = out.WithReference(r)
	}
	if relo := btf.CORERelocationMetadata(&ins); relo != nil {
		out = btf.WithCORERelocationMetadata(out, relo)
	}
	return out
}

func isJump(ins asm.Instruction) bool {
	c := ins.OpCode.Class()
	if !c.IsJump() {
		return false
	}
	op := ins.OpCode.JumpOp()
	return op != asm.Call && op != asm.Exit
}

// jumpOffset is a jump's relative target in raw slots (gotol keeps it in
// the constant).
func jumpOffset(ins asm.Instruction) int {
	if ins.OpCode.Class() == asm.Jump32Class && ins.OpCode.JumpOp() == asm.Ja {
		return int(ins.Constant)
	}
	return int(ins.Offset)
}

func setJumpOffset(ins *asm.Instruction, off int) error {
	if ins.OpCode.Class() == asm.Jump32Class && ins.OpCode.JumpOp() == asm.Ja {
		ins.Constant = int64(off)
		return nil
	}
	if off < -1<<15 || off >= 1<<15 {
		return fmt.Errorf("jump too far for its twin (%d instructions)", off)
	}
	ins.Offset = int16(off)
	return nil
}

// Prints says whether p calls trace_printk or bpf_puts: only then has the
// trace_printk ring lines for a human to read soon.
func Prints(p *ebpf.ProgramSpec) bool {
	for _, ins := range p.Instructions {
		if ins.IsBuiltinCall() && (ins.Constant == int64(asm.FnTracePrintk) || ins.Constant == int64(fnPuts)) {
			return true
		}
	}
	return false
}

// ReferencedMaps lists the maps p references (ld_imm64 of a map or of a
// map value), sorted.
func ReferencedMaps(p *ebpf.ProgramSpec) []string {
	seen := map[string]bool{}
	for _, ins := range p.Instructions {
		if ins.OpCode.IsDWordLoad() && (ins.Src == asm.PseudoMapFD || ins.Src == asm.PseudoMapValue) {
			if r := ins.Reference(); r != "" {
				seen[r] = true
			}
		}
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// twinMap is the kernel map that stands for GPU map ms: same key and
// value, one entry (the verifier checks shapes, not contents).
func twinMap(p *ebpf.ProgramSpec, ms *ebpf.MapSpec) (*ebpf.MapSpec, error) {
	kind, err := gpumap.KindOf(ms)
	if err != nil {
		return nil, fmt.Errorf("GPU program %s (section %s): %w", p.Name, p.SectionName, err)
	}
	m := &ebpf.MapSpec{Name: ms.Name, KeySize: ms.KeySize, ValueSize: ms.ValueSize, MaxEntries: 1}
	switch kind {
	case gpumap.Array, gpumap.HostArray, gpumap.PerThreadArray:
		m.Type, m.KeySize = ebpf.Array, 4
		if strings.HasPrefix(ms.Name, ".") {
			// Global data (.rodata, .data, .bss): constants the program
			// may pass where the kernel wants read-only memory.
			m.Flags, m.Contents = ms.Flags, ms.Contents
			m.MaxEntries = ms.MaxEntries
		}
	case gpumap.Hash:
		m.Type = ebpf.Hash
	case gpumap.RingBuf:
		m.Type, m.KeySize, m.ValueSize, m.MaxEntries = ebpf.RingBuf, 0, 0, twinRingBytes
	default:
		return nil, fmt.Errorf("GPU program %s: map %s of type %v has no kernel twin", p.Name, ms.Name, ms.Type)
	}
	return m, nil
}

// helperName names helper id as a C programmer writes it.
func helperName(id asm.BuiltinFunc) string {
	s := id.String()
	if strings.HasPrefix(s, "Fn") {
		return "bpf_" + camelToSnake(strings.TrimPrefix(s, "Fn"))
	}
	return fmt.Sprintf("helper %d", int32(id))
}

func camelToSnake(s string) string {
	var b strings.Builder
	for i, r := range s {
		if r >= 'A' && r <= 'Z' {
			if i > 0 {
				b.WriteByte('_')
			}
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}
