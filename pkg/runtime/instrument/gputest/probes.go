// Package gputest holds what the GPU check of the instrumentation passes
// needs: probes that count into a device buffer, the driver-API harness
// (ptxcheck.cu) and the tool that makes the clone (ptxinst).
package gputest

import (
	"fmt"

	"github.com/gpubpf/gpubpf/pkg/runtime/instrument"
)

// Counter slots (u64) written by the probes CounterProbes makes.
const (
	SlotEntry   = 0 // +1 per thread at entry
	SlotCtxArg  = 1 // + the u32 parameter at ctx offset argOff, per thread
	SlotExit    = 2 // +1 per thread exit
	SlotLoads   = 3 // +1 per global load
	SlotStores  = 4 // +1 per global store
	SlotAtomics = 5 // +1 per global atomic (atom, red)
	SlotAddrSum = 6 // + address of every access
	SlotSizeSum = 7 // + size of every access
	NumSlots    = 8
)

// CounterProbes returns entry, exit and memory-access probes written the
// way the compiler emits them (.func (.param .b64 ret) NAME(.param .b64
// ctx)) that count into the u64 array at counters with atom.global.add.
// The entry probe also adds the u32 at ctx+argOff, which checks that the
// parameter copy follows CUDA's kernelParams layout.
func CounterProbes(counters uint64, argOff int) (entry, exit, mem *instrument.Probe) {
	entry = &instrument.Probe{Func: "gpubpf_test_entry", UsesCtx: true, PTXVersion: [2]int{6, 0}, PTX: fmt.Sprintf(`.func (.param .b64 gpubpf_r) gpubpf_test_entry(.param .b64 gpubpf_c)
{
	.reg .b64 %%t<6>;
	.reg .b32 %%w<2>;
	ld.param.b64 %%t1, [gpubpf_c];
	ld.u32 %%w1, [%%t1+%d];
	cvt.u64.u32 %%t2, %%w1;
	mov.u64 %%t3, %#x;
	atom.global.add.u64 %%t4, [%%t3+%d], 1;
	atom.global.add.u64 %%t4, [%%t3+%d], %%t2;
	mov.u64 %%t5, 0;
	st.param.b64 [gpubpf_r], %%t5;
	ret;
}
`, argOff, counters, 8*SlotEntry, 8*SlotCtxArg)}
	exit = &instrument.Probe{Func: "gpubpf_test_exit", UsesCtx: false, PTXVersion: [2]int{6, 0}, PTX: fmt.Sprintf(`.func (.param .b64 gpubpf_r) gpubpf_test_exit(.param .b64 gpubpf_c)
{
	.reg .b64 %%t<4>;
	mov.u64 %%t1, %#x;
	atom.global.add.u64 %%t2, [%%t1+%d], 1;
	mov.u64 %%t3, 0;
	st.param.b64 [gpubpf_r], %%t3;
	ret;
}
`, counters, 8*SlotExit)}
	// The record's kind (0 load, 1 store, 2 atomic) picks the slot:
	// SlotLoads + kind.
	mem = &instrument.Probe{Func: "gpubpf_test_mem", UsesCtx: true, PTXVersion: [2]int{6, 0}, PTX: fmt.Sprintf(`.func (.param .b64 gpubpf_r) gpubpf_test_mem(.param .b64 gpubpf_c)
{
	.reg .b64 %%t<10>;
	.reg .b32 %%w<3>;
	ld.param.b64 %%t1, [gpubpf_c];
	ld.u64 %%t2, [%%t1];
	ld.u32 %%w1, [%%t1+8];
	ld.u32 %%w2, [%%t1+12];
	cvt.u64.u32 %%t3, %%w1;
	mul.wide.u32 %%t4, %%w2, 8;
	mov.u64 %%t6, %#x;
	add.u64 %%t5, %%t6, %%t4;
	atom.global.add.u64 %%t7, [%%t5+%d], 1;
	atom.global.add.u64 %%t7, [%%t6+%d], %%t2;
	atom.global.add.u64 %%t7, [%%t6+%d], %%t3;
	mov.u64 %%t8, 0;
	st.param.b64 [gpubpf_r], %%t8;
	ret;
}
`, counters, 8*SlotLoads, 8*SlotAddrSum, 8*SlotSizeSum)}
	return entry, exit, mem
}
