package jit

import (
	"fmt"
	"strings"

	"github.com/cilium/ebpf/asm"

	"github.com/gpubpf/gpubpf/pkg/runtime/gpumap"
)

// Helper IDs (bpftime's GPU helpers and the standard ones).
const (
	hMapLookup     = 1
	hMapUpdate     = 2
	hMapDelete     = 3
	hProbeRead     = 4
	hKtimeNS       = 5
	hTracePrintk   = 6
	hPrandom       = 7
	hSMPProcessor  = 8
	hTailCall      = 12
	hPidTgid       = 14
	hPerfOutput    = 25
	hProbeReadStr  = 45
	hProbeReadUser = 112
	hProbeReadKern = 113
	hProbeUserStr  = 114
	hProbeKernStr  = 115
	hRingOutput    = 130
	hRingReserve   = 131
	hRingSubmit    = 132
	hRingDiscard   = 133
	hPuts          = 501
	hGlobaltimer   = 502
	hBlockIdx      = 503
	hBlockDim      = 504
	hThreadIdx     = 505
	hMembar        = 506
	hExit          = 507
	hGridDim       = 508
	hSMID          = 509
	hWarpID        = 510
	hLaneID        = 511
	hKernelIndex   = 600
	hGridID        = 601
	hActiveMask    = 602
	hShfl          = 603
	hSiteTime      = 604
	hLaunchWord    = 605
	hThreadID      = 606
	hEntryTime     = 607
	hAtomicMax     = 608
	maxPrintkBytes = 256
)

const (
	eNOENT  = -2
	eE2BIG  = -7
	eEXIST  = -17
	eINVAL  = -22
	eNOSPC  = -28
	errRet  = "0x%X"
	ptrNull = "0"
)

// callSeq emits a PTX call of a runtime .func with 64-bit arguments.
func (c *compiler) callSeq(ret, fn string, args ...string) {
	c.runtime[fn] = true
	// Runtime .funcs are private to this probe: a module may hold several
	// probes (entry and exit of one kernel), each with its own copy.
	fn = c.rtName(fn)
	c.b.WriteString("\t{\n")
	if ret != "" {
		c.b.WriteString("\t.param .b64 rv;\n")
	}
	names := make([]string, len(args))
	for k, a := range args {
		names[k] = fmt.Sprintf("q%d", k)
		fmt.Fprintf(c.b, "\t.param .b64 q%d;\n\tst.param.b64 [q%d], %s;\n", k, k, a)
	}
	if ret != "" {
		fmt.Fprintf(c.b, "\tcall.uni (rv), %s, (%s);\n\tld.param.b64 %s, [rv];\n", fn, strings.Join(names, ", "), ret)
	} else {
		fmt.Fprintf(c.b, "\tcall.uni %s, (%s);\n", fn, strings.Join(names, ", "))
	}
	c.b.WriteString("\t}\n")
}

func u(v uint64) string { return fmt.Sprintf("%d", v) }

func errImm(v int) string { return imm64(int64(v)) }

// directValueBase is where value 0 of an array-like map starts.
func directValueBase(m mapRef) (uint64, error) {
	switch m.p.Kind {
	case gpumap.Array:
		return m.p.Addr + gpumap.HeaderSize, nil
	case gpumap.HostArray:
		return m.p.Addr, nil
	}
	return 0, unsupported("direct value access to map %q of kind %v (only arrays and global data)", m.name, m.p.Kind)
}

// probeReadInline is __gpubpf_probe_read for readLen (1, 2, 4 or 8) bytes
// to [stk+readOff] (inlineRead): one load where the source is aligned to
// the size, bytes one at a time where it is not; the first page gets
// Linux's answer, the destination zeroed and -EFAULT, as in the runtime's.
func (c *compiler) probeReadInline() {
	n, bits := c.readLen, c.readLen*8
	fault, store, done := c.label(), c.label(), c.label()
	c.e("setp.lt.u64 %%p1, %%r3, 4096;\n\t@%%p1 bra %s;", fault)
	if n > 1 {
		bytes := c.label()
		c.e("and.b64 %%t5, %%r3, %d;\n\tsetp.ne.u64 %%p1, %%t5, 0;\n\t@%%p1 bra %s;", n-1, bytes)
		c.e("ld.u%d %%t5, [%%r3];\n\tbra.uni %s;", bits, store)
		c.b.WriteString(bytes + ":\n")
		c.e("ld.u8 %%t5, [%%r3];")
		for k := 1; k < n; k++ {
			c.e("ld.u8 %%t6, [%%r3+%d];\n\tshl.b64 %%t6, %%t6, %d;\n\tor.b64 %%t5, %%t5, %%t6;", k, 8*k)
		}
	} else {
		c.e("ld.u8 %%t5, [%%r3];")
	}
	c.e("bra.uni %s;", store)
	c.b.WriteString(fault + ":\n")
	c.e("mov.u64 %%t5, 0;\n\tmov.u64 %%r0, 0xFFFFFFFFFFFFFFF2;\n\tbra.uni %s;", done)
	c.b.WriteString(store + ":\n")
	c.e("mov.u64 %%r0, 0;")
	c.b.WriteString(done + ":\n")
	c.e("st.local.u%d [stk+%d], %%t5;", bits, c.readOff)
}

// tid computes the linear global thread id into the 64-bit register dst,
// using %t8-%t11 as scratch.
func (c *compiler) tid(dst string) {
	c.e("mov.u32 %%w8, %%ctaid.z;\n\tmov.u32 %%w9, %%nctaid.y;\n\tmov.u32 %%w10, %%ctaid.y;\n\tmad.lo.u32 %%w8, %%w8, %%w9, %%w10;")
	c.e("mov.u32 %%w9, %%nctaid.x;\n\tmov.u32 %%w10, %%ctaid.x;\n\tmul.wide.u32 %%t8, %%w8, %%w9;\n\tcvt.u64.u32 %%t9, %%w10;\n\tadd.u64 %%t8, %%t8, %%t9;")
	c.e("mov.u32 %%w8, %%ntid.x;\n\tmov.u32 %%w9, %%ntid.y;\n\tmul.lo.u32 %%w9, %%w8, %%w9;\n\tmov.u32 %%w10, %%ntid.z;\n\tmul.lo.u32 %%w9, %%w9, %%w10;")
	c.e("cvt.u64.u32 %%t9, %%w9;\n\tmul.lo.u64 %%t8, %%t8, %%t9;")
	c.e("mov.u32 %%w9, %%tid.z;\n\tmov.u32 %%w10, %%ntid.y;\n\tmov.u32 %%w11, %%tid.y;\n\tmad.lo.u32 %%w9, %%w9, %%w10, %%w11;")
	c.e("mov.u32 %%w11, %%tid.x;\n\tmad.lo.u32 %%w9, %%w9, %%w8, %%w11;\n\tcvt.u64.u32 %%t9, %%w9;\n\tadd.u64 %s, %%t8, %%t9;", dst)
}

func (c *compiler) atomicScope(p gpumap.Placement) string {
	if p.HostResident {
		return "sys"
	}
	return "gpu"
}

// dispatch emits code for a helper whose map argument is in register r:
// direct code when the map is known statically, otherwise a compare chain
// over the candidate maps (ptxas folds it when r is a constant).
func (c *compiler) dispatch(helper string, r asm.Register, known *[11]int, ok func(gpumap.Kind) bool, fallback string, gen func(m mapRef) error) error {
	if mi := known[r]; mi >= 0 {
		m := c.maps[mi]
		if !ok(m.p.Kind) {
			return unsupported("%s on map %q of kind %v", helper, m.name, m.p.Kind)
		}
		return gen(m)
	}
	var cands []mapRef
	for _, m := range c.maps {
		if ok(m.p.Kind) {
			cands = append(cands, m)
		}
	}
	if len(cands) == 0 {
		return fmt.Errorf("%s needs a map argument, but the program references no map of a kind it accepts", helper)
	}
	done := c.label()
	labels := make([]string, len(cands))
	for k, m := range cands {
		labels[k] = c.label()
		c.e("setp.eq.u64 %%p0, %s, %s;", reg(r), imm64(int64(m.p.Addr)))
		c.e("@%%p0 bra %s;", labels[k])
	}
	c.e("mov.u64 %%r0, %s;", fallback)
	c.e("bra.uni %s;", done)
	for k, m := range cands {
		c.b.WriteString(labels[k] + ":\n")
		if err := gen(m); err != nil {
			return err
		}
		c.e("bra.uni %s;", done)
	}
	c.b.WriteString(done + ":\n")
	return nil
}

func isArrayLike(k gpumap.Kind) bool {
	return k == gpumap.Array || k == gpumap.HostArray || k == gpumap.PerThreadArray
}

// arraySlot leaves the value address of key *(u32*)keyReg in %t5 and sets
// %p1 when there is no such value (key out of range or thread id beyond the
// per-thread slots, which is also counted in the header).
func (c *compiler) arraySlot(m mapRef) {
	p := m.p
	stride := gpumap.Stride(p.ValueSize)
	a, space := c.ptr(asm.R2, 0, 4)
	c.e("ld%s.u32 %%w1, %s;", space, a)
	c.e("setp.ge.u32 %%p1, %%w1, %d;", p.MaxEntries)
	c.e("cvt.u64.u32 %%t5, %%w1;")
	switch p.Kind {
	case gpumap.Array:
		c.e("mad.lo.u64 %%t5, %%t5, %d, %s;", stride, imm64(int64(p.Addr+gpumap.HeaderSize)))
	case gpumap.HostArray:
		c.e("mad.lo.u64 %%t5, %%t5, %d, %s;", stride, imm64(int64(p.Addr)))
	case gpumap.PerThreadArray:
		c.tid("%t6")
		c.e("setp.ge.u64 %%p2, %%t6, %d;", gpumap.Slots(p))
		c.e("mov.u64 %%t7, %s;", imm64(int64(p.Addr+gpumap.OffErrors)))
		c.e("@%%p2 red.global.%s.add.u64 [%%t7], 1;", c.atomicScope(p))
		c.e("or.pred %%p1, %%p1, %%p2;")
		c.e("mad.lo.u64 %%t5, %%t6, %d, %%t5;", p.MaxEntries)
		c.e("mad.lo.u64 %%t5, %%t5, %d, %s;", stride, imm64(int64(p.Addr+gpumap.HeaderSize)))
	}
}

func (c *compiler) hashArgs(p gpumap.Placement) []string {
	return []string{imm64(int64(p.Addr)), u(uint64(p.KeySize)), u(gpumap.HashCapacity(p.MaxEntries)), u(gpumap.HashSlotSize(p.KeySize, p.ValueSize))}
}

// ringFn is the variant of a ring runtime function whose commit has the
// scope the ring's data needs: system scope for host memory, GPU scope for
// device memory (the host copies it only after the commit is visible there).
func (c *compiler) ringFn(base string, p gpumap.Placement) string {
	return base + "_" + ringScope(p)
}

func ringScope(p gpumap.Placement) string {
	if p.HostData {
		return "sys"
	}
	return "gpu"
}

// outputFromStack is __gpubpf_output for a record at a known stack offset
// and of a known size (inlineOutput): reserve, copy with constant-offset
// loads (slots kept in registers become moves), commit.
func (c *compiler) outputFromStack(p gpumap.Placement) {
	done := c.label()
	c.callSeq("%t8", "__gpubpf_rb_reserve", append(ringArgs(p), u(uint64(c.outLen)))...)
	c.e("mov.u64 %%r0, %s;", errImm(eNOSPC))
	c.e("setp.eq.u64 %%p1, %%t8, 0;")
	c.e("@%%p1 bra %s;", done)
	for k := 0; k < c.outLen; {
		w := 8
		for k+w > c.outLen {
			w /= 2
		}
		c.e("ld.local.u%d %%t9, [stk+%d];", w*8, c.outOff+k)
		c.e("st.u%d [%%t8+%d], %%t9;", w*8, k)
		k += w
	}
	c.e("mov.u32 %%w1, %d;", uint32(c.outLen)|gpumap.RecValid)
	c.e("%s.u32 [%%t8+-8], %%w1;", commitStore(ringScope(p)))
	c.e("mov.u64 %%r0, 0;")
	c.b.WriteString(done + ":\n")
}

// ringArgs are the control block, data, shard size, shard mask and shard
// stride arguments of ring functions.
func ringArgs(p gpumap.Placement) []string {
	return []string{imm64(int64(p.Addr)), imm64(int64(gpumap.RingData(p))), u(gpumap.ShardSize(p)),
		u(gpumap.RingShards(p) - 1), u(gpumap.ShardStride(p))}
}

// commitScope is the scope of bpf_ringbuf_submit/discard, which are not
// told the ring: system when any ring of the program has host data.
func (c *compiler) commitScope() string {
	for _, m := range c.maps {
		if m.p.Kind == gpumap.RingBuf && m.p.HostData {
			return "_sys"
		}
	}
	return "_gpu"
}

func (c *compiler) printkRing() (gpumap.Placement, error) {
	p := c.opts.Printk
	if p.Kind != gpumap.RingBuf || p.Addr == 0 {
		return p, fmt.Errorf("trace_printk/bpf_puts need a ring buffer for their records (Options.Printk)")
	}
	return p, nil
}

func (c *compiler) call(i int, ins *asm.Instruction, known *[11]int) error {
	defer func() {
		for r := 0; r <= 5; r++ {
			known[r] = -1
		}
	}()
	if ins.IsFunctionCall() {
		sp := c.subs[c.subAt[c.target[i]]]
		c.b.WriteString("\t{\n\t.param .b64 rv;\n")
		for r := 1; r <= 5; r++ {
			fmt.Fprintf(c.b, "\t.param .b64 c%d;\n\tst.param.b64 [c%d], %%r%d;\n", r, r, r)
		}
		fmt.Fprintf(c.b, "\tcall (rv), %s, (c1, c2, c3, c4, c5);\n\tld.param.b64 %%r0, [rv];\n\t}\n", sp.name)
		return nil
	}
	if ins.IsKfuncCall() {
		return unsupported("kfunc calls")
	}
	if ins.Src != 0 {
		return unsupported("call with source %d", ins.Src)
	}
	id := int64(ins.Constant)
	switch id {
	case hMapLookup:
		return c.dispatch("bpf_map_lookup_elem", asm.R1, known, func(k gpumap.Kind) bool { return isArrayLike(k) || k == gpumap.Hash }, ptrNull, func(m mapRef) error {
			if m.p.Kind == gpumap.Hash {
				c.callSeq("%t5", "__gpubpf_hash_find_"+c.atomicScope(m.p), append(c.hashArgs(m.p)[:1], append([]string{"%r2"}, c.hashArgs(m.p)[1:]...)...)...)
				c.e("setp.eq.u64 %%p1, %%t5, 0;")
				c.e("add.u64 %%t5, %%t5, %d;", 8+gpumap.Stride(m.p.KeySize))
			} else {
				c.arraySlot(m)
			}
			c.e("selp.b64 %%r0, 0, %%t5, %%p1;")
			return nil
		})
	case hMapUpdate:
		return c.dispatch("bpf_map_update_elem", asm.R1, known, func(k gpumap.Kind) bool { return isArrayLike(k) || k == gpumap.Hash }, errImm(eINVAL), func(m mapRef) error {
			if m.p.Kind == gpumap.Hash {
				a := c.hashArgs(m.p)
				c.callSeq("%r0", "__gpubpf_hash_update_"+c.atomicScope(m.p), a[0], "%r2", "%r3", "%r4", a[1], a[2], a[3], u(uint64(m.p.ValueSize)), u(uint64(m.p.MaxEntries)), u(8+gpumap.Stride(m.p.KeySize)))
				return nil
			}
			done := c.label()
			c.e("mov.u64 %%r0, %s;", errImm(eINVAL))
			c.e("setp.gt.u64 %%p0, %%r4, 2;")
			c.e("@%%p0 bra %s;", done)
			c.arraySlot(m)
			c.e("mov.u64 %%r0, %s;", errImm(eE2BIG))
			c.e("@%%p1 bra %s;", done)
			c.e("mov.u64 %%r0, %s;", errImm(eEXIST))
			c.e("setp.eq.u64 %%p0, %%r4, 1;")
			c.e("@%%p0 bra %s;", done)
			c.callSeq("", "__gpubpf_memcpy", "%t5", "%r3", u(uint64(m.p.ValueSize)))
			c.e("mov.u64 %%r0, 0;")
			c.b.WriteString(done + ":\n")
			return nil
		})
	case hMapDelete:
		return c.dispatch("bpf_map_delete_elem", asm.R1, known, func(k gpumap.Kind) bool { return isArrayLike(k) || k == gpumap.Hash }, errImm(eINVAL), func(m mapRef) error {
			if m.p.Kind != gpumap.Hash {
				c.e("mov.u64 %%r0, %s;", errImm(eINVAL))
				return nil
			}
			a := c.hashArgs(m.p)
			c.callSeq("%r0", "__gpubpf_hash_delete_"+c.atomicScope(m.p), a[0], "%r2", a[1], a[2], a[3])
			return nil
		})
	case hProbeRead, hProbeReadUser, hProbeReadKern, hProbeReadStr, hProbeUserStr, hProbeKernStr:
		// (dst, size, src): user and kernel addresses are one generic
		// space on the GPU. size is a u32 in Linux's prototype.
		if c.readAt == c.cur && c.readLen > 0 {
			c.probeReadInline()
			return nil
		}
		fn := "__gpubpf_probe_read"
		if id == hProbeReadStr || id == hProbeUserStr || id == hProbeKernStr {
			fn = "__gpubpf_probe_read_str"
		}
		c.e("and.b64 %%t5, %%r2, 0xFFFFFFFF;")
		c.callSeq("%r0", fn, "%r1", "%t5", "%r3")
	case hKtimeNS, hGlobaltimer:
		c.e("mov.u64 %%r0, %%globaltimer;")
	case hTracePrintk:
		p, err := c.printkRing()
		if err != nil {
			return err
		}
		c.callSeq("%r0", c.ringFn("__gpubpf_log", p), append(ringArgs(p), u(gpumap.PrintkType), "%r1", "%r2", "%r3", "%r4", "%r5")...)
	case hPuts:
		p, err := c.printkRing()
		if err != nil {
			return err
		}
		c.callSeq("%t5", "__gpubpf_strlen", "%r1", u(maxPrintkBytes))
		c.callSeq("%r0", c.ringFn("__gpubpf_log", p), append(ringArgs(p), u(gpumap.PutsType), "%r1", "%t5", "0", "0", "0")...)
	case hPrandom:
		// splitmix64 over globaltimer, clock64 and the thread id: no state,
		// no host, distinct per thread and per call.
		c.tid("%t5")
		c.e("mov.u64 %%t6, %%globaltimer;\n\tmov.u64 %%t7, %%clock64;")
		c.e("shl.b64 %%t5, %%t5, 32;\n\txor.b64 %%t5, %%t5, %%t6;\n\tmad.lo.u64 %%t5, %%t7, 0x9E3779B97F4A7C15, %%t5;")
		c.e("shr.u64 %%t6, %%t5, 30;\n\txor.b64 %%t5, %%t5, %%t6;\n\tmul.lo.u64 %%t5, %%t5, 0xBF58476D1CE4E5B9;")
		c.e("shr.u64 %%t6, %%t5, 27;\n\txor.b64 %%t5, %%t5, %%t6;\n\tmul.lo.u64 %%t5, %%t5, 0x94D049BB133111EB;")
		c.e("shr.u64 %%t6, %%t5, 31;\n\txor.b64 %%t5, %%t5, %%t6;\n\tand.b64 %%r0, %%t5, 0xFFFFFFFF;")
	case hSMPProcessor, hSMID:
		c.e("mov.u32 %%w1, %%smid;\n\tcvt.u64.u32 %%r0, %%w1;")
	case hWarpID:
		c.e("mov.u32 %%w1, %%warpid;\n\tcvt.u64.u32 %%r0, %%w1;")
	case hLaneID:
		c.e("mov.u32 %%w1, %%laneid;\n\tcvt.u64.u32 %%r0, %%w1;")
	case hKernelIndex:
		// Known only where the body is pasted into a kernel:
		// InlineAt puts the number in.
		c.usesKernel = true
		c.e("mov.u64 %%r0, %s;", kernelIndexToken)
	case hGridID:
		c.e("mov.u64 %%r0, %%gridid;")
	case hSiteTime:
		// Read at the site before the probe's first branch, where the
		// body is pasted (InlineAt puts the register in); the called form
		// reads the clock here.
		c.usesSiteTime = true
		c.e("mov.u64 %%r0, %s;", siteTimeToken)
	case hEntryTime:
		// The thread's clock at its kernel's entry, read into a register
		// there by the instrumenter (Site.EntryTime); 0 where the kernel's
		// entry is out of reach.
		c.usesEntryTime = true
		c.e("mov.u64 %%r0, %s;", entryTimeToken)
	case hLaunchWord:
		// The words the agent passes with each launch of the clone
		// (hidden kernel parameters, loaded into registers at kernel
		// start): InlineAt puts the registers in; 0 elsewhere.
		c.usesLaunch = true
		c.e("setp.eq.u64 %%p1, %%r1, 0;\n\tselp.b64 %%r0, %s, %s, %%p1;", launchWordTokens[0], launchWordTokens[1])
	case hAtomicMax:
		// bpf_gpu_atomic_max(p, v): BPF has no atomic max instruction;
		// one atom.max at p (a plain read-modify-write on the stack),
		// the old value returned.
		if err := c.rmw("max", true, 8, asm.R1, 0, asm.R2); err != nil {
			return err
		}
		c.e("mov.u64 %%r0, %%r2;")
	case hThreadID:
		// Special registers only: the pointer-filling helpers (503/505)
		// cost every thread stores and loads of its stack.
		c.tid("%r0")
	case hActiveMask:
		c.e("activemask.b32 %%w1;\n\tcvt.u64.u32 %%r0, %%w1;")
	case hShfl:
		// bpf_gpu_shfl(value, src_lane, mask): every lane of mask must
		// make the same call (shfl.sync), as in CUDA's __shfl_sync.
		c.e("cvt.u32.u64 %%w1, %%r3;\n\tcvt.u32.u64 %%w2, %%r2;\n\tmov.b64 {%%w3, %%w4}, %%r1;")
		c.e("shfl.sync.idx.b32 %%w3, %%w3, %%w2, 31, %%w1;\n\tshfl.sync.idx.b32 %%w4, %%w4, %%w2, 31, %%w1;")
		c.e("mov.b64 %%r0, {%%w3, %%w4};")
	case hPidTgid:
		c.e("mov.u64 %%r0, %s;", imm64(int64(uint64(c.opts.PID)<<32|uint64(c.opts.PID))))
	case hBlockIdx, hBlockDim, hThreadIdx, hGridDim:
		sreg := map[int64]string{hBlockIdx: "%ctaid", hBlockDim: "%ntid", hThreadIdx: "%tid", hGridDim: "%nctaid"}[id]
		for k, d := range []string{"x", "y", "z"} {
			a, space := c.ptr(asm.Register(k+1), 0, 8)
			c.e("mov.u32 %%w1, %s.%s;\n\tcvt.u64.u32 %%t5, %%w1;\n\tst%s.u64 %s, %%t5;", sreg, d, space, a)
		}
		c.e("mov.u64 %%r0, 0;")
	case hMembar:
		c.e("membar.sys;\n\tmov.u64 %%r0, 0;")
	case hExit:
		c.e("exit;")
	case hPerfOutput, hRingOutput:
		mapReg, data, size := asm.R2, "%r4", "%r5"
		if id == hRingOutput {
			mapReg, data, size = asm.R1, "%r2", "%r3"
		}
		return c.dispatch("event output", mapReg, known, func(k gpumap.Kind) bool { return k == gpumap.RingBuf }, errImm(eINVAL), func(m mapRef) error {
			if c.outAt == c.cur && c.outLen > 0 {
				c.outputFromStack(m.p)
				return nil
			}
			c.callSeq("%r0", c.ringFn("__gpubpf_output", m.p), append(ringArgs(m.p), data, size)...)
			return nil
		})
	case hRingReserve:
		return c.dispatch("bpf_ringbuf_reserve", asm.R1, known, func(k gpumap.Kind) bool { return k == gpumap.RingBuf }, ptrNull, func(m mapRef) error {
			c.callSeq("%r0", "__gpubpf_rb_reserve", append(ringArgs(m.p), "%r2")...)
			return nil
		})
	case hRingSubmit, hRingDiscard:
		d := "0"
		if id == hRingDiscard {
			d = "1"
		}
		c.callSeq("", "__gpubpf_rb_commit"+c.commitScope(), "%r1", d)
		c.e("mov.u64 %%r0, 0;")
	case hTailCall:
		return unsupported("tail calls (bpf_tail_call)")
	default:
		return unsupported("helper %v (id %d)", asm.BuiltinFunc(id), id)
	}
	return nil
}

// runtimePTX returns declarations of the subprograms and the runtime .funcs
// the program uses (each once, dependencies included).
func (c *compiler) runtimePTX() string {
	var b strings.Builder
	for _, sp := range c.subs[1:] {
		fmt.Fprintf(&b, ".func (.param .b64 ret) %s(.param .b64 a1, .param .b64 a2, .param .b64 a3, .param .b64 a4, .param .b64 a5);\n", sp.name)
	}
	deps := map[string][]string{
		"__gpubpf_hash_find_gpu":   {"__gpubpf_fnv"},
		"__gpubpf_hash_find_sys":   {"__gpubpf_fnv"},
		"__gpubpf_hash_update_gpu": {"__gpubpf_hash_find_gpu", "__gpubpf_memcpy", "__gpubpf_fnv"},
		"__gpubpf_hash_update_sys": {"__gpubpf_hash_find_sys", "__gpubpf_memcpy", "__gpubpf_fnv"},
		"__gpubpf_hash_delete_gpu": {"__gpubpf_hash_find_gpu"},
		"__gpubpf_hash_delete_sys": {"__gpubpf_hash_find_sys"},
		"__gpubpf_log_gpu":         {"__gpubpf_rb_reserve", "__gpubpf_memcpy"},
		"__gpubpf_log_sys":         {"__gpubpf_rb_reserve", "__gpubpf_memcpy"},
		"__gpubpf_output_gpu":      {"__gpubpf_rb_reserve", "__gpubpf_memcpy"},
		"__gpubpf_output_sys":      {"__gpubpf_rb_reserve", "__gpubpf_memcpy"},
		"__gpubpf_probe_read":      {"__gpubpf_memcpy"},
	}
	need := map[string]bool{}
	var add func(string)
	add = func(n string) {
		if need[n] {
			return
		}
		need[n] = true
		for _, d := range deps[n] {
			add(d)
		}
	}
	for n := range c.runtime {
		add(n)
	}
	// Emit in dependency order: leaves first.
	order := []string{"__gpubpf_memcpy", "__gpubpf_fnv", "__gpubpf_strlen", "__gpubpf_probe_read", "__gpubpf_probe_read_str", "__gpubpf_rb_commit_gpu", "__gpubpf_rb_commit_sys",
		"__gpubpf_rb_reserve", "__gpubpf_hash_find_gpu", "__gpubpf_hash_find_sys",
		"__gpubpf_hash_update_gpu", "__gpubpf_hash_update_sys", "__gpubpf_hash_delete_gpu", "__gpubpf_hash_delete_sys",
		"__gpubpf_log_gpu", "__gpubpf_log_sys", "__gpubpf_output_gpu", "__gpubpf_output_sys"}
	for _, n := range order {
		if need[n] {
			b.WriteString(strings.ReplaceAll(runtimeFunc(n, c.name), "__gpubpf_", c.name+"__rt_"))
		}
	}
	return b.String()
}

// rtName is the probe-private name of runtime function fn.
func (c *compiler) rtName(fn string) string {
	return c.name + "__rt_" + strings.TrimPrefix(fn, "__gpubpf_")
}
