// Package sanpatch builds the patch module through which GPU programs reach
// kernels that have no PTX (SASS only: cuBLAS, PyTorch's own kernels).
//
// NVIDIA's Compute Sanitizer patching API calls device functions of a
// "patch module" at block entry and block exit of every thread of a kernel
// already loaded. Module pastes the entry programs' bodies into EnterFunc and
// the exit programs' into ExitFunc, with the signature the sanitizer calls:
//
//	SanitizerPatchResult cb(void *userdata, uint64_t pc)   // returns 0
//
// A callback runs in the thread of the patched kernel (%tid, %ctaid, %smid,
// %globaltimer, %gridid are that thread's) but sees none of the kernel's
// parameters and keeps no register from one callback to the next. userdata
// is set by the agent per CUDA function: for a kernel a tool selected, a
// device address holding that kernel's u32 kernel index; for the other
// kernels of a patched module NULL, and the callback then returns at once.
//
// The sanitizer only accepts functions of a cubin that ptxas assembled with
// --compile-as-tools-patch (plain PTX, a driver-JIT cubin or a plain ptxas
// cubin load, but their functions are refused): see Ptxas.Compile.
package sanpatch

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/gpubpf/gpubpf/pkg/runtime/jit"
	"github.com/gpubpf/gpubpf/pkg/runtime/ptx"
)

// Names of the two callbacks, which the agent hands to
// sanitizerPatchInstructions (block enter and block exit).
const (
	EnterFunc = "gpubpf_san_enter"
	ExitFunc  = "gpubpf_san_exit"
)

// TimesVar is the module-scope table through which the enter callback
// hands each thread's entry time to the exit callback (registers do not
// survive between callbacks). Slot = (%smid*TableWarps + %warpid)*32 +
// %laneid, each {time, tag}; the tag identifies the thread instance (its
// grid, block and thread in block), and the exit callback takes the time
// only when the tag is its own. %warpid can change when a thread is
// preempted and resumed elsewhere: the exit then finds another thread's
// tag (or none) and its entry time is 0, a run the tools count as having
// no entry time, never a wrong time. Threads on an SM past TableSMs or a
// warp slot past TableWarps store nothing and read 0 the same way.
const (
	TimesVar   = "gpubpf_san_times"
	TableSMs   = 256
	TableWarps = 64
	tableSlots = TableSMs * TableWarps * 32
)

// minISA is the lowest .version Module emits: the first PTX ISA that
// knows sm_90.
var minISA = [2]int{7, 8}

// archISA holds the first PTX ISA that knows each architecture newer than
// sm_90 (the older ones are all known by minISA): a Blackwell target in a
// module at .version 7.8 is refused by ptxas.
var archISA = map[int][2]int{100: {8, 6}, 101: {8, 6}, 103: {8, 8}, 110: {9, 0}, 120: {8, 7}, 121: {8, 8}}

var archRe = regexp.MustCompile(`^sm_([0-9]+)([af]?)$`)

// archMinISA returns the lowest .version that arch ("sm_90a") needs.
func archMinISA(arch string) ([2]int, error) {
	m := archRe.FindStringSubmatch(arch)
	if m == nil {
		return [2]int{}, fmt.Errorf("sanpatch: target %q is not a GPU architecture like sm_90", arch)
	}
	n, _ := strconv.Atoi(m[1])
	v := minISA
	if a, ok := archISA[n]; ok {
		v = a
	}
	switch {
	case m[2] == "a" && n == 90 && ptx.VersionLess(v, [2]int{8, 0}):
		v = [2]int{8, 0}
	case m[2] == "f" && ptx.VersionLess(v, [2]int{8, 8}):
		v = [2]int{8, 8}
	}
	return v, nil
}

// Module builds the patch module's PTX for arch ("sm_90"): entry's
// programs pasted into EnterFunc, exit's into ExitFunc, each program's
// f.PTX (its subprograms and runtime helpers) at module scope. A callback
// with no program is left out, except the enter callback when an exit
// program reads bpf_gpu_entry_time (it then only records the time).
// Programs that read the kernel's parameters (UsesCtx) are refused: no
// parameter reaches a sanitizer callback. bpf_gpu_launch_word is 0 here (no
// launch words either).
func Module(entry, exit []*jit.Function, arch string) (string, error) {
	if len(entry) == 0 && len(exit) == 0 {
		return "", errors.New("sanpatch: no program to patch in")
	}
	v, err := archMinISA(arch)
	if err != nil {
		return "", err
	}
	var defs strings.Builder
	seen := map[string]*jit.Function{}
	needTable := false
	for i, f := range append(append([]*jit.Function(nil), entry...), exit...) {
		if f == nil {
			return "", errors.New("sanpatch: nil program")
		}
		if f.UsesCtx {
			return "", fmt.Errorf("sanpatch: program %s reads the kernel's parameters (ctx), and no kernel parameter reaches a Compute Sanitizer callback: it cannot run in a kernel patched without PTX", f.Name)
		}
		if g, ok := seen[f.Name]; ok {
			if g != f {
				return "", fmt.Errorf("sanpatch: two programs are both named %s", f.Name)
			}
			continue // in both lists: defined once
		}
		seen[f.Name] = f
		if ptx.VersionLess(v, f.PTXVersion) {
			v = f.PTXVersion
		}
		needTable = needTable || i >= len(entry) && f.UsesEntryTime
		defs.WriteString(f.PTX)
		defs.WriteString("\n")
	}
	var b strings.Builder
	fmt.Fprintf(&b, ".version %d.%d\n.target %s\n.address_size 64\n\n", v[0], v[1], arch)
	if needTable {
		fmt.Fprintf(&b, ".global .align 16 .b64 %s[%d];\n\n", TimesVar, 2*tableSlots)
	}
	b.WriteString(defs.String())
	if len(entry) > 0 || needTable {
		wrapper(&b, EnterFunc, entry, true, needTable)
	}
	if len(exit) > 0 {
		wrapper(&b, ExitFunc, exit, false, needTable)
	}
	return b.String(), nil
}

// wrapper writes one callback: the userdata check, the clock, the kernel
// index, the entry-time table when table is set (the enter callback stores
// to it, the exit callback loads from it), then each program's body.
func wrapper(b *strings.Builder, name string, fns []*jit.Function, enter, table bool) {
	clock, kernel := table, false
	for _, f := range fns {
		clock = clock || f.UsesSiteTime || f.UsesEntryTime
		kernel = kernel || f.UsesKernelIndex
	}
	fmt.Fprintf(b, ".visible .func (.param .b32 gpubpf_res) %s(.param .b64 gpubpf_ud, .param .b64 gpubpf_pc)\n{\n", name)
	b.WriteString("\t.reg .b64 %gpubpf_ud, %gpubpf_k, %gpubpf_now, %gpubpf_entry, %gpubpf_a, %gpubpf_t, %gpubpf_u, %gpubpf_tag;\n")
	b.WriteString("\t.reg .b32 %gpubpf_w<3>;\n\t.reg .pred %gpubpf_q;\n")
	b.WriteString("\tld.param.b64 %gpubpf_ud, [gpubpf_ud];\n\tsetp.eq.u64 %gpubpf_q, %gpubpf_ud, 0;\n\t@%gpubpf_q bra $gpubpf_done;\n")
	site := jit.Site{Ctx: "0"}
	if clock {
		b.WriteString("\tmov.u64 %gpubpf_now, %globaltimer;\n")
		site.Time = "%gpubpf_now"
		if enter {
			site.EntryTime = "%gpubpf_now"
		}
	}
	if kernel {
		b.WriteString("\tld.u32 %gpubpf_w0, [%gpubpf_ud];\n\tcvt.u64.u32 %gpubpf_k, %gpubpf_w0;\n")
		site.KernelReg = "%gpubpf_k"
	}
	if table && !enter {
		b.WriteString("\tmov.u64 %gpubpf_entry, 0;\n")
		site.EntryTime = "%gpubpf_entry"
	}
	if table {
		writeSlot(b)
		if enter {
			b.WriteString("\tst.global.v2.u64 [%gpubpf_a], {%gpubpf_now, %gpubpf_tag};\n")
		} else {
			b.WriteString("\tld.global.v2.u64 {%gpubpf_t, %gpubpf_u}, [%gpubpf_a];\n")
			b.WriteString("\tsetp.eq.u64 %gpubpf_q, %gpubpf_u, %gpubpf_tag;\n\tselp.b64 %gpubpf_entry, %gpubpf_t, 0, %gpubpf_q;\n")
		}
		b.WriteString("$gpubpf_noslot:\n")
	}
	for i, f := range fns {
		s := site
		s.Uniq = fmt.Sprintf("gpubpf_p%d", i) // labels are local to the callback
		b.WriteString(f.InlineAt(s))
	}
	b.WriteString("$gpubpf_done:\n\tst.param.b32 [gpubpf_res], 0;\n\tret;\n}\n\n")
}

// writeSlot sets %gpubpf_a to the thread's slot of TimesVar and
// %gpubpf_tag to its tag, or branches to $gpubpf_noslot when the thread's
// SM or warp slot is past the table. The tag mixes %gridid (a bijection,
// multiplying by an odd constant) with block*1024 + thread, which is
// unique within a grid.
func writeSlot(b *strings.Builder) {
	fmt.Fprintf(b, `	mov.u32 %%gpubpf_w0, %%smid;
	mov.u32 %%gpubpf_w1, %%warpid;
	mov.u32 %%gpubpf_w2, %%laneid;
	setp.ge.u32 %%gpubpf_q, %%gpubpf_w0, %d;
	setp.ge.or.u32 %%gpubpf_q, %%gpubpf_w1, %d, %%gpubpf_q;
	@%%gpubpf_q bra $gpubpf_noslot;
	mad.lo.u32 %%gpubpf_w0, %%gpubpf_w0, %d, %%gpubpf_w1;
	mad.lo.u32 %%gpubpf_w0, %%gpubpf_w0, 32, %%gpubpf_w2;
	mov.u64 %%gpubpf_a, %s;
	mad.wide.u32 %%gpubpf_a, %%gpubpf_w0, 16, %%gpubpf_a;
	mov.u32 %%gpubpf_w0, %%ctaid.z;
	mov.u32 %%gpubpf_w1, %%nctaid.y;
	mul.wide.u32 %%gpubpf_t, %%gpubpf_w0, %%gpubpf_w1;
	mov.u32 %%gpubpf_w0, %%ctaid.y;
	cvt.u64.u32 %%gpubpf_u, %%gpubpf_w0;
	add.u64 %%gpubpf_t, %%gpubpf_t, %%gpubpf_u;
	mov.u32 %%gpubpf_w0, %%nctaid.x;
	cvt.u64.u32 %%gpubpf_u, %%gpubpf_w0;
	mul.lo.u64 %%gpubpf_t, %%gpubpf_t, %%gpubpf_u;
	mov.u32 %%gpubpf_w0, %%ctaid.x;
	cvt.u64.u32 %%gpubpf_u, %%gpubpf_w0;
	add.u64 %%gpubpf_t, %%gpubpf_t, %%gpubpf_u;
	mov.u32 %%gpubpf_w0, %%tid.z;
	mov.u32 %%gpubpf_w1, %%ntid.y;
	mov.u32 %%gpubpf_w2, %%tid.y;
	mad.lo.u32 %%gpubpf_w0, %%gpubpf_w0, %%gpubpf_w1, %%gpubpf_w2;
	mov.u32 %%gpubpf_w1, %%ntid.x;
	mov.u32 %%gpubpf_w2, %%tid.x;
	mad.lo.u32 %%gpubpf_w0, %%gpubpf_w0, %%gpubpf_w1, %%gpubpf_w2;
	cvt.u64.u32 %%gpubpf_u, %%gpubpf_w0;
	mad.lo.u64 %%gpubpf_t, %%gpubpf_t, 1024, %%gpubpf_u;
	mov.u64 %%gpubpf_u, %%gridid;
	mul.lo.u64 %%gpubpf_u, %%gpubpf_u, 0x9E3779B97F4A7C15;
	xor.b64 %%gpubpf_tag, %%gpubpf_t, %%gpubpf_u;
`, TableSMs, TableWarps, TableWarps, TimesVar)
}
