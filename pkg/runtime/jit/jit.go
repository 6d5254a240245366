// Package jit compiles eBPF programs (cilium/ebpf ProgramSpecs) to PTX
// device functions that run inside every thread of a CUDA kernel.
//
// Calling convention (what the PTX injector emits):
//
//	.func (.param .b64 ret) NAME(.param .b64 ctx)
//
// called once per GPU thread; ctx is a generic address of the kernel's
// launch parameters (CUDA kernelParams layout) in a buffer of at least
// Function.CtxBytes bytes, or 0 when Function.UsesCtx is false. BPF registers r0-r10 become 64-bit PTX registers; r10 points to the
// end of a per-thread 512-byte .local stack frame (one per subprogram);
// subprograms become separate .funcs. Map memory is addressed through the
// immediate addresses of Options.Maps (layouts: package gpumap). No helper
// waits on a host thread: everything is loads, stores and atomics.
package jit

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"

	"github.com/gpubpf/gpubpf/pkg/runtime/gpumap"
)

// Options configure one compilation.
type Options struct {
	// Maps holds the placement of every map the program references, by
	// MapSpec name.
	Maps map[string]gpumap.Placement
	// Printk is the RingBuf that trace_printk/bpf_puts records go to.
	Printk gpumap.Placement
	// PID is the tgid (and pid) bpf_get_current_pid_tgid reports.
	PID uint32
	// FuncName names the emitted .func (default "gpubpf_probe").
	FuncName string
	// Constants holds the contents of read-only global data (.rodata:
	// the tools' const volatile knobs), by map name: a load from it at an
	// offset the compiler can follow becomes an immediate, one memory
	// round trip fewer on every thread that reads a knob.
	Constants map[string][]byte
	// LoopBudget, when not 0, puts a per-thread iteration budget on every
	// loop head of the program (a jump back to it), where the verifier's
	// CPU twin has its may_goto (verify.Verdict.LoopBudget): each
	// function call counts the heads it passes, and past LoopBudget of
	// them returns 0 at the head, the path the twin's may_goto verified;
	// from the probe's entry function that leaves the probe, and the
	// application's kernel goes on. Each such return adds 1 to the u64 at
	// Printk.Addr + gpumap.OffBudget, which the drains of that ring read.
	LoopBudget uint64
}

// Function is a compiled probe.
type Function struct {
	Name string
	// PTX holds the .func definition plus the helper .funcs it calls, with
	// no .version/.target header.
	PTX string
	// UsesCtx is false when the program never accesses memory through its
	// ctx argument (nor hands it where the compiler does not follow it).
	UsesCtx bool
	// CtxBytes is how many bytes of ctx the program may access: the end
	// (offset + size) of its furthest ctx access, or CtxMax where a ctx
	// pointer goes where the compiler does not follow it (a variable
	// offset, a store, a helper or subprogram argument). The injector
	// makes the ctx buffer at least this big, zeros past the kernel's
	// parameters. 0 when the program reads no byte of ctx.
	CtxBytes int
	// PTXVersion is the lowest .version the body needs.
	PTXVersion [2]int

	// UsesKernelIndex is set when the program calls bpf_gpu_kernel_index:
	// its inline body must be pasted with InlineAt.
	UsesKernelIndex bool
	// UsesSiteTime is set when the program calls bpf_gpu_site_time: the
	// site must read %globaltimer into Site.Time before the pasted body.
	UsesSiteTime bool
	// UsesLaunchWords is set when the program calls bpf_gpu_launch_word:
	// the kernel must take the hidden launch parameters (Site.Launch).
	UsesLaunchWords bool
	// UsesEntryTime is set when the program calls bpf_gpu_entry_time: the
	// kernel must read %globaltimer at its entry into Site.EntryTime.
	UsesEntryTime bool

	inline string
}

// UnknownKernel is what bpf_gpu_kernel_index returns where the kernel is
// not known when the probe is placed: in the called .func form of a probe,
// in a bpf-to-bpf subprogram, or at a site inside a device function that
// several kernels call.
const UnknownKernel = 0xFFFFFFFF

// kernelIndexToken stands for the kernel index in the compiled text until
// InlineAt (or Compile, for the .func form) replaces it.
const kernelIndexToken = "GPUBPF_KERNEL_INDEX"

// siteTimeToken stands for the register holding the site's time until
// InlineAt (or Compile, for the .func form) replaces it.
const siteTimeToken = "GPUBPF_SITE_TIME"

// entryTimeToken stands for the register holding the thread's time at its
// kernel's entry until InlineAt (or Compile: 0) replaces it.
const entryTimeToken = "GPUBPF_ENTRY_TIME"

// launchWordTokens stand for the registers holding the launch words.
var launchWordTokens = [2]string{"GPUBPF_LAUNCH_W0", "GPUBPF_LAUNCH_W1"}

// Site says where an inlined body is pasted. Ctx is a 64-bit register or
// immediate holding the ctx pointer, Ret a 64-bit register that receives
// the return value ("" to drop it), Uniq a label prefix unique in the
// kernel (letters, digits, _), Kernel what bpf_gpu_kernel_index returns
// there, Time a 64-bit register the site set to %globaltimer before the
// body ("" reads the clock where bpf_gpu_site_time is called), and Launch
// the 64-bit registers holding the launch words ("" where the kernel has
// none: bpf_gpu_launch_word returns 0).
type Site struct {
	Ctx, Ret, Uniq string
	Kernel         uint32
	Time           string
	Launch         [2]string
	// EntryTime: the register holding the thread's %globaltimer at its
	// kernel's entry ("": bpf_gpu_entry_time returns 0).
	EntryTime string
	// KernelReg, when not "", is a 64-bit register holding the kernel
	// index, used instead of the constant Kernel: where one body serves
	// every kernel and the index is only known at run time (a Compute
	// Sanitizer patch callback reads it from its userdata).
	KernelReg string
}

// InlineBody returns the probe's main function as a nested PTX block
// ("{ ... }") to paste straight into a kernel instead of a call: ptxas does
// not inline .func calls, so a call costs a CALL/RET pair and register
// spills even for an empty probe, while an inlined empty block assembles to
// nothing. ctx is a 64-bit register or immediate holding the ctx pointer,
// ret a 64-bit register that receives the return value ("" to drop it),
// uniq a label prefix unique in the kernel (letters, digits, _). f.PTX must
// still be placed at module scope: the block calls its subprograms and
// runtime helpers there. Exit of the program becomes a branch to the end of
// the block; bpf_gpu_exit (507) still ends the thread.
func (f *Function) InlineBody(ctx, ret, uniq string) string {
	return f.InlineAt(Site{Ctx: ctx, Ret: ret, Uniq: uniq, Kernel: UnknownKernel})
}

// InlineAt is InlineBody for a site described by s.
func (f *Function) InlineAt(s Site) string {
	body := f.inlineBody(s.Ctx, s.Ret, s.Uniq)
	if f.UsesKernelIndex {
		k := s.KernelReg
		if k == "" {
			k = fmt.Sprintf("%d", s.Kernel)
		}
		body = strings.ReplaceAll(body, kernelIndexToken, k)
	}
	if f.UsesSiteTime {
		t := s.Time
		if t == "" {
			t = "%globaltimer"
		}
		body = strings.ReplaceAll(body, siteTimeToken, t)
	}
	if f.UsesLaunchWords {
		body = replaceLaunchWords(body, s.Launch)
	}
	if f.UsesEntryTime {
		t := s.EntryTime
		if t == "" {
			t = "0"
		}
		body = strings.ReplaceAll(body, entryTimeToken, t)
	}
	return body
}

func replaceLaunchWords(text string, regs [2]string) string {
	for i, tok := range launchWordTokens {
		r := regs[i]
		if r == "" {
			r = "0"
		}
		text = strings.ReplaceAll(text, tok, r)
	}
	return text
}

func (f *Function) inlineBody(ctx, ret, uniq string) string {
	if ctx == "" {
		ctx = "0"
	}
	body := strings.ReplaceAll(f.inline, "ld.param.u64 %r1, [ctx];", "mov.u64 %r1, "+ctx+";")
	exit := "bra.uni $" + uniq + "_exit;"
	if ret != "" {
		exit = "mov.u64 " + ret + ", %r0;\n\t" + exit
	}
	body = strings.ReplaceAll(body, "st.param.b64 [ret], %r0;\n\tret;", exit)
	body = strings.ReplaceAll(body, "$L", "$"+uniq+"_L")
	body = strings.ReplaceAll(body, "$T", "$"+uniq+"_T")
	return "\t{\n" + body + "$" + uniq + "_exit:\n\t}\n"
}

// ErrUnsupported is wrapped by every error about a program the compiler
// cannot translate.
var ErrUnsupported = errors.New("not supported on the GPU")

// DefaultFuncName is the .func name used when Options.FuncName is empty.
const DefaultFuncName = "gpubpf_probe"

// StackSize is the per-thread stack of each (sub)program, as in the kernel.
const StackSize = 512

// Compile translates prog into a PTX device function.
func Compile(prog *ebpf.ProgramSpec, opts Options) (f *Function, err error) {
	if prog == nil {
		return nil, errors.New("jit: nil program")
	}
	name := opts.FuncName
	if name == "" {
		name = DefaultFuncName
	}
	if !validIdent(name) {
		return nil, fmt.Errorf("program %s: function name %q is not a valid PTX identifier", prog.Name, name)
	}
	c := &compiler{prog: prog, opts: opts, name: name, insns: prog.Instructions}
	if err := c.run(); err != nil {
		return nil, err
	}
	text := c.out.String()
	if c.usesKernel {
		text = strings.ReplaceAll(text, kernelIndexToken, fmt.Sprintf("%d", uint32(UnknownKernel)))
	}
	if c.usesSiteTime {
		text = strings.ReplaceAll(text, siteTimeToken, "%globaltimer")
	}
	if c.usesLaunch {
		text = replaceLaunchWords(text, [2]string{})
	}
	if c.usesEntryTime {
		text = strings.ReplaceAll(text, entryTimeToken, "0")
	}
	return &Function{Name: name, PTX: text, UsesCtx: c.usesCtx, CtxBytes: c.ctxReach, UsesKernelIndex: c.usesKernel, UsesSiteTime: c.usesSiteTime,
		UsesLaunchWords: c.usesLaunch, UsesEntryTime: c.usesEntryTime, PTXVersion: [2]int{7, 8}, inline: c.inline}, nil
}

// TestModule wraps f into a complete PTX module with a small entry
// "gpubpf_test_entry(.param .u64 ctx, .param .u64 out)" that calls it once
// per thread and, when out is not 0, stores thread i's return value at
// out[i] (i = ctaid.x*ntid.x+tid.x).
func TestModule(f *Function, sm string) string {
	return TestModuleAll([]*Function{f}, sm)
}

// TestModuleAll is TestModule for several probes in one module: one header,
// every probe, and an entry per probe (gpubpf_test_entry for the first,
// gpubpf_test_entry_NAME for the others).
func TestModuleAll(fns []*Function, sm string) string {
	if sm == "" {
		sm = "sm_90"
	}
	v := [2]int{7, 0}
	for _, f := range fns {
		if f.PTXVersion[0] > v[0] || f.PTXVersion[0] == v[0] && f.PTXVersion[1] > v[1] {
			v = f.PTXVersion
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, ".version %d.%d\n.target %s\n.address_size 64\n\n", v[0], v[1], sm)
	for i, f := range fns {
		b.WriteString(f.PTX)
		entry := "gpubpf_test_entry"
		if i > 0 {
			entry += "_" + f.Name
		}
		fmt.Fprintf(&b, `.visible .entry %s(.param .u64 ctx, .param .u64 out)
{
	.reg .b64 %%a<6>;
	.reg .b32 %%i<4>;
	.reg .pred %%q;
	ld.param.u64 %%a0, [ctx];
	ld.param.u64 %%a1, [out];
	{
	.param .b64 rv;
	.param .b64 arg;
	st.param.b64 [arg], %%a0;
	call.uni (rv), %s, (arg);
	ld.param.b64 %%a2, [rv];
	}
	setp.eq.u64 %%q, %%a1, 0;
	@%%q bra $done;
	mov.u32 %%i0, %%ctaid.x;
	mov.u32 %%i1, %%ntid.x;
	mov.u32 %%i2, %%tid.x;
	mad.lo.u32 %%i3, %%i0, %%i1, %%i2;
	mul.wide.u32 %%a3, %%i3, 8;
	add.u64 %%a4, %%a1, %%a3;
	st.u64 [%%a4], %%a2;
$done:
	ret;
}

`, entry, f.Name)
	}
	return b.String()
}

func validIdent(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		ok := r == '_' || r == '$' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (i > 0 && r >= '0' && r <= '9')
		if !ok {
			return false
		}
	}
	return true
}

// subprog is one bpf function: instructions [start, end).
type subprog struct {
	start, end int
	name       string
}

type mapRef struct {
	name string
	p    gpumap.Placement
}

type compiler struct {
	prog  *ebpf.ProgramSpec
	opts  Options
	name  string
	insns asm.Instructions

	*flow // raw offsets and every jump's and call's target
	subs  []*subprog
	subAt map[int]int // start index -> subprog number

	maps     []mapRef
	mapIdx   map[string]int
	scope    string // "gpu" or "sys": scope of atomics on program memory
	usesCtx  bool
	ctxReach int // Function.CtxBytes

	out           strings.Builder
	inline        string           // main function's body, for Function.InlineBody
	usesKernel    bool             // bpf_gpu_kernel_index is called
	usesSiteTime  bool             // bpf_gpu_site_time is called
	usesLaunch    bool             // bpf_gpu_launch_word is called
	usesEntryTime bool             // bpf_gpu_entry_time is called
	b             *strings.Builder // current function body
	labels        int
	runtime       map[string]bool  // helper .funcs to append
	cur           int              // instruction being compiled (for errors)
	isTarget      map[int]bool     // instructions of the current function that are jump targets
	fp            [11]int          // r10-relative offset held by each register...
	fpOK          [11]bool         // ...when known (per basic block)
	stackMem      [stackSlots]bool // slots of the function being compiled that stay in memory
	stackAll      bool             // ...all of them
	ro            roState          // read-only data each register points into (per basic block)
	// outAt, outOff, outLen: the event output call at instruction outAt
	// copies outLen bytes from [stk+outOff] itself (stackUse decides)
	outAt, outOff, outLen int
	// readAt, readOff, readLen: the probe_read call at instruction readAt
	// loads its readLen bytes itself into [stk+readOff] (stackUse decides)
	readAt, readOff, readLen int
}

// errAt wraps err with the program, instruction index and C source line.
func (c *compiler) errAt(i int, err error) error {
	where := fmt.Sprintf("program %s: instruction %d", c.prog.Name, i)
	if i >= 0 && i < len(c.insns) {
		ins := c.insns[i]
		where += fmt.Sprintf(" (%v)", ins)
		if line := SourceLine(c.insns, i); line != "" {
			where += ": source " + line
		}
	}
	return fmt.Errorf("%s: %w", where, err)
}

// SourceLine is "file:line: text" of the BTF line info that covers
// instruction i ("" without line info).
func SourceLine(insns asm.Instructions, i int) string {
	for j := min(i, len(insns)-1); j >= 0; j-- {
		if s := insns[j].Source(); s != nil {
			if l, ok := s.(*btf.Line); ok {
				if l.LineNumber() == 0 {
					continue // compiler-made code: the line before says more
				}
				return fmt.Sprintf("%s:%d: %s", l.FileName(), l.LineNumber(), strings.TrimSpace(l.Line()))
			}
			return strings.TrimSpace(s.String())
		}
	}
	return ""
}

func unsupported(format string, a ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, a...), ErrUnsupported)
}

func (c *compiler) run() error {
	n := len(c.insns)
	if n == 0 {
		return fmt.Errorf("program %s has no instructions", c.prog.Name)
	}
	fl, err := resolveFlow(c.insns)
	if err != nil {
		var te *targetError
		if errors.As(err, &te) {
			return c.errAt(te.at, te.err)
		}
		return err
	}
	c.flow = fl
	c.subAt = map[int]int{}
	starts := fl.starts
	sort.Ints(starts)
	for k, s := range starts {
		end := n
		if k+1 < len(starts) {
			end = starts[k+1]
		}
		name := c.name
		if s != 0 {
			name = fmt.Sprintf("%s__sub%d", c.name, s)
		}
		c.subAt[s] = k
		c.subs = append(c.subs, &subprog{start: s, end: end, name: name})
	}
	// Jumps must stay inside their function; calls must hit a start.
	for _, sp := range c.subs {
		for i := sp.start; i < sp.end; i++ {
			t := c.target[i]
			if t < 0 {
				continue
			}
			if c.insns[i].IsFunctionCall() {
				continue
			}
			if t < sp.start || t >= sp.end {
				return c.errAt(i, fmt.Errorf("jump to instruction %d leaves the function starting at %d", t, sp.start))
			}
		}
	}

	if err := c.collectMaps(); err != nil {
		return err
	}
	// A ctx the program never accesses memory through (it reads r1 only
	// as the argument of a helper that takes none, or copies it around)
	// needs no buffer: the kernel would otherwise copy its parameters to
	// local memory in every thread, for nothing (measured: launchlate's
	// entry probe cost vec_add x1.75 at 1M threads that way).
	if c.readsCtx() {
		c.ctxReach = c.ctxBytes()
		c.usesCtx = c.ctxReach > 0
	}
	c.runtime = map[string]bool{}

	var funcs strings.Builder
	funcs.Grow(len(c.insns) * 96)
	for k := len(c.subs) - 1; k >= 0; k-- {
		// Callees first so that every .func is declared before use.
		body, err := c.compileFunc(c.subs[k])
		if err != nil {
			return err
		}
		funcs.WriteString(body)
	}
	c.out.WriteString(c.runtimePTX())
	c.out.WriteString(funcs.String())
	return nil
}

// collectMaps finds every map reference and checks its placement.
func (c *compiler) collectMaps() error {
	c.mapIdx = map[string]int{}
	c.scope = "gpu"
	// Refuse tail calls before complaining about their program-array map.
	for i := range c.insns {
		if c.insns[i].IsBuiltinCall() && c.insns[i].Constant == hTailCall {
			return c.errAt(i, unsupported("tail calls (bpf_tail_call): there is no program array on the GPU; call a __noinline function instead"))
		}
	}
	for i := range c.insns {
		ins := &c.insns[i]
		if !ins.IsLoadFromMap() {
			continue
		}
		name := ins.Reference()
		if name == "" {
			return c.errAt(i, fmt.Errorf("map load without a map name: build the program from an object file or use WithReference(mapName)"))
		}
		if _, ok := c.mapIdx[name]; ok {
			continue
		}
		p, ok := c.opts.Maps[name]
		if !ok {
			return c.errAt(i, fmt.Errorf("map %q has no GPU placement (Options.Maps)", name))
		}
		if err := checkPlacement(p); err != nil {
			return c.errAt(i, fmt.Errorf("map %q: %w", name, err))
		}
		c.mapIdx[name] = len(c.maps)
		c.maps = append(c.maps, mapRef{name, p})
		if p.HostResident && p.Kind != gpumap.RingBuf {
			c.scope = "sys"
		}
	}
	return nil
}

func checkPlacement(p gpumap.Placement) error {
	switch p.Kind {
	case gpumap.Array, gpumap.HostArray, gpumap.PerThreadArray:
		if p.ValueSize == 0 || p.MaxEntries == 0 {
			return fmt.Errorf("%v needs a value size and max entries", p.Kind)
		}
	case gpumap.Hash:
		if p.KeySize == 0 || p.ValueSize == 0 || p.MaxEntries == 0 {
			return fmt.Errorf("hash needs key size, value size and max entries")
		}
	case gpumap.RingBuf:
		if n := gpumap.RingSize(p); n < 4096 || n&(n-1) != 0 || n > 1<<40 {
			return fmt.Errorf("ring buffer of %d data bytes: want a power of two of at least 4096", n)
		}
		if n := gpumap.RingShards(p); n&(n-1) != 0 || gpumap.ShardSize(p) < 4096 {
			return fmt.Errorf("ring buffer of %d data bytes in %d shards: want a power of two of shards of at least 4096 bytes each", gpumap.RingSize(p), n)
		}
		if gpumap.RingData(p)%8 != 0 {
			return fmt.Errorf("ring buffer data address %#x is not 8-byte aligned", gpumap.RingData(p))
		}
	default:
		return fmt.Errorf("placement kind %v is unknown", p.Kind)
	}
	if p.Addr == 0 {
		return fmt.Errorf("placement has address 0")
	}
	if p.Addr%8 != 0 {
		return fmt.Errorf("placement address %#x is not 8-byte aligned", p.Addr)
	}
	return nil
}

// readsCtx reports whether the main function may read r1 before writing it.
func (c *compiler) readsCtx() bool {
	sp := c.subs[0]
	isTarget := map[int]bool{}
	for i := range c.insns {
		if t := c.target[i]; t >= 0 && !c.insns[i].IsFunctionCall() {
			isTarget[t] = true
		}
	}
	for i := sp.start; i < sp.end; i++ {
		if i > sp.start && isTarget[i] {
			return true
		}
		r, w := regUse(&c.insns[i])
		if r&(1<<1) != 0 {
			return true
		}
		if w&(1<<1) != 0 {
			return false
		}
		if c.insns[i].OpCode.Class().IsJump() {
			// A branch or exit: conservatively stop unless it is exit.
			return c.insns[i].OpCode.JumpOp() != asm.Exit
		}
	}
	return false
}

// regUse returns bitmasks of registers read and written by ins.
func regUse(ins *asm.Instruction) (read, write uint16) {
	bit := func(r asm.Register) uint16 { return 1 << (r & 15) }
	op := ins.OpCode
	switch cls := op.Class(); {
	case cls.IsALU():
		a := op.ALUOp()
		if a != asm.Mov && a != asm.MovSX8 && a != asm.MovSX16 && a != asm.MovSX32 {
			read |= bit(ins.Dst)
		}
		if op.Source() == asm.RegSource && a != asm.Swap && a != asm.Neg {
			read |= bit(ins.Src)
		}
		write |= bit(ins.Dst)
	case cls == asm.LdClass:
		write |= bit(ins.Dst)
	case cls == asm.LdXClass:
		read |= bit(ins.Src)
		write |= bit(ins.Dst)
	case cls == asm.StClass:
		read |= bit(ins.Dst)
	case cls == asm.StXClass:
		read |= bit(ins.Dst) | bit(ins.Src)
		if op.Mode() == asm.AtomicMode {
			read |= 1 // cmpxchg reads r0
			write |= bit(ins.Src) | 1
		}
	case cls.IsJump():
		switch op.JumpOp() {
		case asm.Call:
			read |= 0x3e // r1-r5: arguments
			write |= 0x3f
		case asm.Exit:
			read |= 1
		case asm.Ja:
		default:
			read |= bit(ins.Dst)
			if op.Source() == asm.RegSource {
				read |= bit(ins.Src)
			}
		}
	}
	return
}
