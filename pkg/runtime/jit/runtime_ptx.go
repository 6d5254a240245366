package jit

import (
	"os"
	"strconv"
	"strings"

	"github.com/gpubpf/gpubpf/pkg/runtime/gpumap"
)

// runtimeFunc returns the PTX of one runtime .func. Names ending in _gpu or
// _sys use that atomic scope. They are renamed per probe later so that two
// probes can share a module.
func runtimeFunc(name, _ string) string {
	base, scope := name, "gpu"
	if strings.HasSuffix(name, "_gpu") || strings.HasSuffix(name, "_sys") {
		base, scope = name[:len(name)-4], name[len(name)-3:]
	}
	src, ok := runtimeSrc[base]
	if !ok {
		panic("jit: unknown runtime function " + name)
	}
	src = strings.ReplaceAll(src, "COMMITSTORE", commitStore(scope))
	src = strings.ReplaceAll(src, "SCOPE", scope)
	src = strings.ReplaceAll(src, "RINGTAIL", strconv.Itoa(gpumap.RingTail))
	src = strings.ReplaceAll(src, "WAITBOUND", strconv.Itoa(gpumap.OffWaitBound))
	src = strings.ReplaceAll(src, "WAITDROPS", strconv.Itoa(gpumap.OffWaitDrops))
	src = strings.ReplaceAll(src, "WAITS", strconv.Itoa(gpumap.OffWaits))
	src = strings.ReplaceAll(src, "NAME", name)
	src = strings.ReplaceAll(src, "_SC", "_"+scope)
	if !ringPrecheck {
		for _, l := range precheckLines {
			src = strings.Replace(src, l, "", 1)
		}
	}
	if ringKeyByGridWarp {
		src = strings.Replace(src, slotKeyLines, gridWarpKeyLines, 1)
	}
	return src + "\n"
}

// commitStore is the store that commits a ring record: system-scope
// release for data in host memory (the tool reads it in place), relaxed
// for device memory (the host copies it only after a later copy saw it).
func commitStore(scope string) string {
	if scope == "sys" {
		return "st.release.sys"
	}
	return "st.relaxed.gpu"
}

// ringKeyByGridWarp picks a record's shard by the warp's index in the grid
// (the default) instead of its hardware slot, (%smid*8 + %warpid) mod 32
// (GPUBPF_RING_KEY=slot, a measurement switch, docs/event-path.md). The
// slot key keeps only %smid mod 4, and the GPU hands a grid's first blocks
// to every other SM: small's 4 blocks wrote into 16 of the 32 shards, so
// half the ring held its stream (H100, 2026-11-23: 90% delivered against
// 99% keyed by grid warp, kernel time the same at every preset measured).
var ringKeyByGridWarp = os.Getenv("GPUBPF_RING_KEY") != "slot"

// slotKeyLines computes the hardware-slot shard key in __gpubpf_rb_reserve;
// gridWarpKeyLines the grid-warp one (the linear block index times the
// warps per block, plus the warp's linear thread index / 32). Either way
// the lowest active lane's key is taken by every lane.
const slotKeyLines = "\tmov.u32 %b15, %smid;\n\tmov.u32 %b14, %warpid;\n\tmad.lo.u32 %b15, %b15, 8, %b14;\n"

const gridWarpKeyLines = `	mov.u32 %b15, %tid.x;
	mov.u32 %b14, %tid.y;
	mov.u32 %b8, %ntid.x;
	mad.lo.u32 %b15, %b14, %b8, %b15;
	mov.u32 %b14, %tid.z;
	mov.u32 %b9, %ntid.y;
	mul.lo.u32 %b10, %b8, %b9;
	mad.lo.u32 %b15, %b14, %b10, %b15;
	shr.u32 %b15, %b15, 5;
	mov.u32 %b14, %ntid.z;
	mul.lo.u32 %b10, %b10, %b14;
	add.u32 %b10, %b10, 31;
	shr.u32 %b10, %b10, 5;
	mov.u32 %b14, %ctaid.x;
	mov.u32 %b8, %ctaid.y;
	mov.u32 %b9, %nctaid.x;
	mad.lo.u32 %b14, %b8, %b9, %b14;
	mov.u32 %b8, %ctaid.z;
	mov.u32 %b11, %nctaid.y;
	mul.lo.u32 %b9, %b9, %b11;
	mad.lo.u32 %b14, %b8, %b9, %b14;
	mad.lo.u32 %b15, %b14, %b10, %b15;
`

// ringPrecheck: a warp loads the claimed bytes beside the released position
// and recognises a full ring from them before it claims, so that a full
// ring costs one load and one counter update per warp instead of a claim
// atomic and its give-back on the shard's most contended word. The claim
// then waits for that load, one memory round trip more while there is
// room; measured the better at every preset all the same (H100,
// 2026-11-23, with records written from registers: tiny x1.32 / medium
// x1.28 / xlarge x1.45 against x1.42 / x1.36 / x1.60 without).
// GPUBPF_RING_PRECHECK=0 turns it off for measurement
// (scripts/gpu/event-bench.sh's noprecheck, docs/event-path.md).
var ringPrecheck = os.Getenv("GPUBPF_RING_PRECHECK") != "0"

var precheckLines = []string{
	"\tld.relaxed.gpu.u64 %a9, [%a0+192];\n",
	"\tadd.u64 %a10, %a9, %a7;\n\tsub.u64 %a10, %a10, %a8;\n\tsetp.gt.u64 %q5, %a10, %a2;\n\t@%q5 bra $FULLNOW;\n",
}

var runtimeSrc = map[string]string{
	// memcpy(dst, src, n): 8-byte words when both addresses are aligned,
	// four loads in flight before their stores, else eight bytes in flight;
	// the tail byte by byte. Each dependent load is a memory round trip on
	// the calling warp: a printk's 36-byte format string (.rodata strings
	// have no alignment, and 36 is no multiple of 8) copied a byte at a time
	// was 36 of them.
	"__gpubpf_memcpy": `.func NAME(.param .b64 d, .param .b64 s, .param .b64 n)
{
	.reg .b64 %a<10>;
	.reg .b32 %b<9>;
	.reg .pred %q<2>;
	ld.param.u64 %a0, [d];
	ld.param.u64 %a1, [s];
	ld.param.u64 %a2, [n];
	or.b64 %a3, %a0, %a1;
	and.b64 %a3, %a3, 7;
	mov.u64 %a4, 0;
	setp.ne.u64 %q0, %a3, 0;
	@%q0 bra $BYTES8;
$QUAD:
	add.u64 %a5, %a4, 32;
	setp.gt.u64 %q0, %a5, %a2;
	@%q0 bra $WORDS;
	add.u64 %a5, %a1, %a4;
	ld.u64 %a6, [%a5];
	ld.u64 %a3, [%a5+8];
	ld.u64 %a8, [%a5+16];
	ld.u64 %a9, [%a5+24];
	add.u64 %a7, %a0, %a4;
	st.u64 [%a7], %a6;
	st.u64 [%a7+8], %a3;
	st.u64 [%a7+16], %a8;
	st.u64 [%a7+24], %a9;
	add.u64 %a4, %a4, 32;
	bra.uni $QUAD;
$WORDS:
	add.u64 %a5, %a4, 8;
	setp.gt.u64 %q0, %a5, %a2;
	@%q0 bra $BYTES;
	add.u64 %a5, %a1, %a4;
	ld.u64 %a6, [%a5];
	add.u64 %a7, %a0, %a4;
	st.u64 [%a7], %a6;
	add.u64 %a4, %a4, 8;
	bra.uni $WORDS;
$BYTES8:
	add.u64 %a5, %a4, 8;
	setp.gt.u64 %q0, %a5, %a2;
	@%q0 bra $BYTES;
	add.u64 %a5, %a1, %a4;
	ld.u8 %b1, [%a5];
	ld.u8 %b2, [%a5+1];
	ld.u8 %b3, [%a5+2];
	ld.u8 %b4, [%a5+3];
	ld.u8 %b5, [%a5+4];
	ld.u8 %b6, [%a5+5];
	ld.u8 %b7, [%a5+6];
	ld.u8 %b8, [%a5+7];
	add.u64 %a7, %a0, %a4;
	st.u8 [%a7], %b1;
	st.u8 [%a7+1], %b2;
	st.u8 [%a7+2], %b3;
	st.u8 [%a7+3], %b4;
	st.u8 [%a7+4], %b5;
	st.u8 [%a7+5], %b6;
	st.u8 [%a7+6], %b7;
	st.u8 [%a7+7], %b8;
	add.u64 %a4, %a4, 8;
	bra.uni $BYTES8;
$BYTES:
	setp.ge.u64 %q0, %a4, %a2;
	@%q0 bra $END;
	add.u64 %a5, %a1, %a4;
	ld.u8 %b0, [%a5];
	add.u64 %a7, %a0, %a4;
	st.u8 [%a7], %b0;
	add.u64 %a4, %a4, 1;
	bra.uni $BYTES;
$END:
	ret;
}
`,
	// probe_read(dst, n, src): Linux's bpf_probe_read_{,user,kernel}.
	// No load can be made fault-safe on the GPU: the one bad source
	// checked is the first page (NULL and a field offset from it), which
	// gets Linux's answer, dst zeroed and -EFAULT; any other address not
	// mapped on the device still faults the CUDA context.
	"__gpubpf_probe_read": `.func (.param .b64 ret) NAME(.param .b64 d, .param .b64 n, .param .b64 s)
{
	.reg .b64 %a<4>;
	.reg .pred %q0;
	ld.param.u64 %a0, [d];
	ld.param.u64 %a1, [n];
	ld.param.u64 %a2, [s];
	setp.lt.u64 %q0, %a2, 4096;
	@%q0 bra $FAULT;
	{
	.param .b64 x0;
	.param .b64 x1;
	.param .b64 x2;
	st.param.b64 [x0], %a0;
	st.param.b64 [x1], %a2;
	st.param.b64 [x2], %a1;
	call.uni __gpubpf_memcpy, (x0, x1, x2);
	}
	st.param.b64 [ret], 0;
	ret;
$FAULT:
	mov.u64 %a3, 0;
$Z:
	setp.ge.u64 %q0, %a3, %a1;
	@%q0 bra $D;
	add.u64 %a2, %a0, %a3;
	st.u8 [%a2], 0;
	add.u64 %a3, %a3, 1;
	bra.uni $Z;
$D:
	st.param.b64 [ret], 0xFFFFFFFFFFFFFFF2;
	ret;
}
`,
	// probe_read_str(dst, n, src): Linux's bpf_probe_read_*_str: up to
	// n-1 bytes up to and including a NUL, dst always NUL-terminated,
	// the rest of dst untouched; returns the bytes written including the
	// NUL, 0 for n = 0 (before src is looked at, as in Linux), and for a
	// source in the first page dst zeroed and -EFAULT (see probe_read).
	// A byte at a time: the string's length is not known before it is read.
	"__gpubpf_probe_read_str": `.func (.param .b64 ret) NAME(.param .b64 d, .param .b64 n, .param .b64 s)
{
	.reg .b64 %a<6>;
	.reg .b32 %b0;
	.reg .pred %q0;
	ld.param.u64 %a0, [d];
	ld.param.u64 %a1, [n];
	ld.param.u64 %a2, [s];
	mov.u64 %a3, 0;
	setp.eq.u64 %q0, %a1, 0;
	@%q0 bra $RET;
	setp.lt.u64 %q0, %a2, 4096;
	@%q0 bra $FAULT;
	sub.u64 %a4, %a1, 1;
$L:
	setp.ge.u64 %q0, %a3, %a4;
	@%q0 bra $TERM;
	add.u64 %a5, %a2, %a3;
	ld.u8 %b0, [%a5];
	add.u64 %a5, %a0, %a3;
	st.u8 [%a5], %b0;
	add.u64 %a3, %a3, 1;
	setp.ne.u32 %q0, %b0, 0;
	@%q0 bra $L;
	bra.uni $RET;
$TERM:
	add.u64 %a5, %a0, %a3;
	st.u8 [%a5], 0;
	add.u64 %a3, %a3, 1;
	bra.uni $RET;
$FAULT:
	setp.ge.u64 %q0, %a3, %a1;
	@%q0 bra $EFAULT;
	add.u64 %a5, %a0, %a3;
	st.u8 [%a5], 0;
	add.u64 %a3, %a3, 1;
	bra.uni $FAULT;
$EFAULT:
	mov.u64 %a3, 0xFFFFFFFFFFFFFFF2;
$RET:
	st.param.b64 [ret], %a3;
	ret;
}
`,
	// fnv(key, n): FNV-1a 32 over n bytes (gpumap.FNV1a).
	"__gpubpf_fnv": `.func (.param .b64 ret) NAME(.param .b64 k, .param .b64 n)
{
	.reg .b64 %a<4>;
	.reg .b32 %b<2>;
	.reg .pred %q0;
	ld.param.u64 %a0, [k];
	ld.param.u64 %a1, [n];
	mov.u32 %b0, 0x811C9DC5;
	mov.u64 %a2, 0;
$L:
	setp.ge.u64 %q0, %a2, %a1;
	@%q0 bra $D;
	add.u64 %a3, %a0, %a2;
	ld.u8 %b1, [%a3];
	xor.b32 %b0, %b0, %b1;
	mul.lo.u32 %b0, %b0, 16777619;
	add.u64 %a2, %a2, 1;
	bra.uni $L;
$D:
	cvt.u64.u32 %a3, %b0;
	st.param.b64 [ret], %a3;
	ret;
}
`,
	"__gpubpf_strlen": `.func (.param .b64 ret) NAME(.param .b64 s, .param .b64 max)
{
	.reg .b64 %a<4>;
	.reg .b32 %b0;
	.reg .pred %q0;
	ld.param.u64 %a0, [s];
	ld.param.u64 %a1, [max];
	mov.u64 %a2, 0;
$L:
	setp.ge.u64 %q0, %a2, %a1;
	@%q0 bra $D;
	add.u64 %a3, %a0, %a2;
	ld.u8 %b0, [%a3];
	setp.eq.u32 %q0, %b0, 0;
	@%q0 bra $D;
	add.u64 %a2, %a2, 1;
	bra.uni $L;
$D:
	st.param.b64 [ret], %a2;
	ret;
}
`,
	// commit(ptr, discard): publish word0 = len | valid (| discard); word1
	// already holds the position tag (reserve).
	// Host data (_sys) is read in place by the tool: a system-scope release
	// orders the payload before word0. Device data (_gpu) is read through
	// DMA copies, and gpumap.Reader consumes a record only from a copy made
	// after an earlier copy already showed it committed (tens of
	// microseconds later, after a full drain round trip): a plain store
	// suffices there, and a fence per record would cost every warp a wait
	// for its stores.
	"__gpubpf_rb_commit": `.func NAME(.param .b64 p, .param .b64 disc)
{
	.reg .b64 %a<2>;
	.reg .b32 %b<2>;
	.reg .pred %q0;
	ld.param.u64 %a0, [p];
	ld.param.u64 %a1, [disc];
	setp.eq.u64 %q0, %a0, 0;
	@%q0 bra $D;
	ld.u32 %b0, [%a0+-8];
	or.b32 %b0, %b0, 0x80000000;
	setp.ne.u64 %q0, %a1, 0;
	@%q0 or.b32 %b0, %b0, 0x40000000;
	COMMITSTORE.u32 [%a0+-8], %b0;
$D:
	ret;
}
`,
	// reserve(ctl, data, size, smask, sstride, len): the calling warp's
	// active lanes reserve together in shard (%smid*8 + %warpid) & smask as
	// the lowest active lane reads them (both may change when a preempted
	// warp resumes elsewhere, so every lane takes that lane's) (control block
	// ctl + shard*256, data at data + shard*sstride, size data bytes per
	// shard; gpumap's RingBuf): offsets by popc (equal sizes)
	// or a shuffle sum, one claim on the control block checked against
	// the released position, one add for the positions, the base
	// broadcast by shfl. A ring already full is seen with plain loads
	// (no atomic on the hot counters while dropping). A full ring drops
	// at once, unless its control block holds a wait bound (a tool's
	// --no-drop): then the claiming lane sleeps and looks again until the
	// host has released room or the bound (microseconds, on %globaltimer)
	// has passed, counting the warps that waited and those that gave up.
	// Returns the payload address, or 0 when the record was dropped
	// (counted).
	"__gpubpf_rb_reserve": `.func (.param .b64 ret) NAME(.param .b64 ctl, .param .b64 data, .param .b64 size, .param .b64 smask, .param .b64 sstride, .param .b64 len)
{
	.reg .b64 %a<14>;
	.reg .b32 %b<16>;
	.reg .pred %q<6>;
	ld.param.u64 %a0, [ctl];
	ld.param.u64 %a1, [data];
	ld.param.u64 %a2, [size];
	ld.param.u64 %a3, [len];
	ld.param.u64 %a10, [smask];
	ld.param.u64 %a11, [sstride];
	add.u64 %a4, %a3, 15;
	and.b64 %a4, %a4, 0xFFFFFFFFFFFFFFF8;
	setp.gt.u64 %q0, %a4, RINGTAIL;
	selp.b64 %a4, 0, %a4, %q0;
	cvt.u32.u64 %b0, %a4;
	activemask.b32 %b1;
	mov.u32 %b2, %laneid;
	brev.b32 %b3, %b1;
	bfind.shiftamt.u32 %b3, %b3;
	mov.u32 %b15, %smid;
	mov.u32 %b14, %warpid;
	mad.lo.u32 %b15, %b15, 8, %b14;
	shfl.sync.idx.b32 %b15, %b15, %b3, 31, %b1;
	cvt.u64.u32 %a12, %b15;
	and.b64 %a12, %a12, %a10;
	mad.lo.u64 %a0, %a12, 256, %a0;
	mad.lo.u64 %a1, %a12, %a11, %a1;
	ld.relaxed.gpu.u64 %a8, [%a0+128];
	ld.relaxed.gpu.u64 %a9, [%a0+192];
	shfl.sync.idx.b32 %b4, %b0, %b3, 31, %b1;
	setp.eq.u32 %q1, %b4, %b0;
	vote.sync.all.pred %q1, %q1, %b1;
	mov.u32 %b5, %lanemask_lt;
	and.b32 %b5, %b5, %b1;
	@!%q1 bra $VAR;
	popc.b32 %b6, %b5;
	mul.lo.u32 %b6, %b6, %b0;
	popc.b32 %b7, %b1;
	mul.lo.u32 %b7, %b7, %b0;
	bra.uni $AGG;
$VAR:
	mov.u32 %b6, 0;
	mov.u32 %b7, 0;
	mov.u32 %b8, 0;
$VL:
	shfl.sync.idx.b32 %b9, %b0, %b8, 31, %b1;
	shr.b32 %b10, %b1, %b8;
	and.b32 %b10, %b10, 1;
	setp.ne.u32 %q2, %b10, 0;
	@%q2 add.u32 %b7, %b7, %b9;
	setp.lt.u32 %q3, %b8, %b2;
	and.pred %q3, %q3, %q2;
	@%q3 add.u32 %b6, %b6, %b9;
	add.u32 %b8, %b8, 1;
	setp.lt.u32 %q2, %b8, 32;
	@%q2 bra $VL;
$AGG:
	vote.sync.ballot.b32 %b11, %q0, %b1;
	popc.b32 %b11, %b11;
	popc.b32 %b12, %b1;
	setp.eq.u32 %q4, %b2, %b3;
	mov.u64 %a5, 0xFFFFFFFFFFFFFFFF;
	@!%q4 bra $BC;
	mov.u64 %a12, 0;
	cvt.u64.u32 %a6, %b12;
	cvt.u64.u32 %a7, %b7;
	setp.eq.u64 %q5, %a7, 0;
	@%q5 bra $BIG;
	add.u64 %a10, %a9, %a7;
	sub.u64 %a10, %a10, %a8;
	setp.gt.u64 %q5, %a10, %a2;
	@%q5 bra $FULLNOW;
$CLAIM:
	atom.relaxed.gpu.add.u64 %a9, [%a0+192], %a7;
	add.u64 %a10, %a9, %a7;
	sub.u64 %a10, %a10, %a8;
	setp.gt.u64 %q5, %a10, %a2;
	@%q5 bra $FULL;
	atom.relaxed.gpu.add.u64 %a5, [%a0+64], %a7;
	sub.u32 %b13, %b12, %b11;
	cvt.u64.u32 %a6, %b13;
	red.relaxed.gpu.add.u64 [%a0+32], %a6;
$BIG:
	setp.eq.u32 %q5, %b11, 0;
	@%q5 bra $BC;
	cvt.u64.u32 %a6, %b11;
	red.relaxed.gpu.add.u64 [%a0+24], %a6;
	bra.uni $BC;
$FULL:
	neg.s64 %a11, %a7;
	red.relaxed.gpu.add.u64 [%a0+192], %a11;
$FULLNOW:
	ld.relaxed.gpu.u32 %b13, [%a0+WAITBOUND];
	setp.eq.u32 %q5, %b13, 0;
	@%q5 bra $DROPPED;
	setp.ne.u64 %q5, %a12, 0;
	@%q5 bra $SLEEP;
	red.relaxed.gpu.add.u64 [%a0+WAITS], 1;
	mov.u64 %a13, %globaltimer;
	cvt.u64.u32 %a12, %b13;
	mad.lo.u64 %a12, %a12, 1000, %a13;
$SLEEP:
	nanosleep.u32 256;
	mov.u64 %a13, %globaltimer;
	setp.gt.u64 %q5, %a13, %a12;
	@%q5 bra $GAVEUP;
	ld.relaxed.gpu.u64 %a8, [%a0+128];
	ld.relaxed.gpu.u64 %a11, [%a0+192];
	add.u64 %a11, %a11, %a7;
	sub.u64 %a11, %a11, %a8;
	setp.gt.u64 %q5, %a11, %a2;
	@%q5 bra $SLEEP;
	bra.uni $CLAIM;
$GAVEUP:
	red.relaxed.gpu.add.u64 [%a0+WAITDROPS], 1;
$DROPPED:
	red.relaxed.gpu.add.u64 [%a0+24], %a6;
$BC:
	mov.b64 {%b13, %b14}, %a5;
	shfl.sync.idx.b32 %b13, %b13, %b3, 31, %b1;
	shfl.sync.idx.b32 %b14, %b14, %b3, 31, %b1;
	mov.b64 %a5, {%b13, %b14};
	setp.eq.s64 %q5, %a5, -1;
	or.pred %q5, %q5, %q0;
	@%q5 bra $DROP;
	cvt.u64.u32 %a12, %b6;
	add.u64 %a12, %a5, %a12;
	shr.u64 %a13, %a12, 3;
	cvt.u32.u64 %b14, %a13;
	sub.u64 %a13, %a2, 1;
	and.b64 %a12, %a12, %a13;
	add.u64 %a12, %a1, %a12;
	cvt.u32.u64 %b15, %a3;
	st.v2.u32 [%a12], {%b15, %b14};
	add.u64 %a12, %a12, 8;
	st.param.b64 [ret], %a12;
	ret;
$DROP:
	st.param.b64 [ret], 0;
	ret;
}
`,
	// output(ctl, data, size, smask, sstride, src, len): reserve, copy, commit.
	// The commit stores the header word the reserve wrote (its length) with
	// the valid bit, instead of loading it back: a load of it is one more
	// memory round trip on every record's path.
	"__gpubpf_output": `.func (.param .b64 ret) NAME(.param .b64 ctl, .param .b64 data, .param .b64 size, .param .b64 smask, .param .b64 sstride, .param .b64 src, .param .b64 len)
{
	.reg .b64 %a<8>;
	.reg .b32 %b0;
	.reg .pred %q0;
	ld.param.u64 %a0, [ctl];
	ld.param.u64 %a1, [data];
	ld.param.u64 %a2, [size];
	ld.param.u64 %a3, [src];
	ld.param.u64 %a4, [len];
	ld.param.u64 %a6, [smask];
	ld.param.u64 %a7, [sstride];
	{
	.param .b64 r;
	.param .b64 x0;
	.param .b64 x1;
	.param .b64 x2;
	.param .b64 x3;
	.param .b64 x4;
	.param .b64 x5;
	st.param.b64 [x0], %a0;
	st.param.b64 [x1], %a1;
	st.param.b64 [x2], %a2;
	st.param.b64 [x3], %a6;
	st.param.b64 [x4], %a7;
	st.param.b64 [x5], %a4;
	call.uni (r), __gpubpf_rb_reserve, (x0, x1, x2, x3, x4, x5);
	ld.param.b64 %a5, [r];
	}
	setp.eq.u64 %q0, %a5, 0;
	@%q0 bra $DROP;
	{
	.param .b64 x0;
	.param .b64 x1;
	.param .b64 x2;
	st.param.b64 [x0], %a5;
	st.param.b64 [x1], %a3;
	st.param.b64 [x2], %a4;
	call.uni __gpubpf_memcpy, (x0, x1, x2);
	}
	cvt.u32.u64 %b0, %a4;
	or.b32 %b0, %b0, 0x80000000;
	COMMITSTORE.u32 [%a5+-8], %b0;
	st.param.b64 [ret], 0;
	ret;
$DROP:
	st.param.b64 [ret], -28;
	ret;
}
`,
	// log(ctl, data, size, smask, sstride, type, str, n, a1, a2, a3): a printk/puts
	// record, committed as output's is.
	"__gpubpf_log": `.func (.param .b64 ret) NAME(.param .b64 ctl, .param .b64 data, .param .b64 size, .param .b64 smask, .param .b64 sstride, .param .b64 ty, .param .b64 s, .param .b64 n, .param .b64 x1, .param .b64 x2, .param .b64 x3)
{
	.reg .b64 %a<14>;
	.reg .b32 %b0;
	.reg .pred %q0;
	ld.param.u64 %a12, [smask];
	ld.param.u64 %a13, [sstride];
	ld.param.u64 %a0, [ctl];
	ld.param.u64 %a1, [data];
	ld.param.u64 %a11, [size];
	ld.param.u64 %a2, [ty];
	ld.param.u64 %a3, [s];
	ld.param.u64 %a4, [n];
	ld.param.u64 %a5, [x1];
	ld.param.u64 %a6, [x2];
	ld.param.u64 %a7, [x3];
	min.u64 %a4, %a4, 256;
	add.u64 %a8, %a4, 32;
	{
	.param .b64 r;
	.param .b64 y0;
	.param .b64 y1;
	.param .b64 y2;
	.param .b64 y3;
	.param .b64 y4;
	.param .b64 y5;
	st.param.b64 [y0], %a0;
	st.param.b64 [y1], %a1;
	st.param.b64 [y2], %a11;
	st.param.b64 [y3], %a12;
	st.param.b64 [y4], %a13;
	st.param.b64 [y5], %a8;
	call.uni (r), __gpubpf_rb_reserve, (y0, y1, y2, y3, y4, y5);
	ld.param.b64 %a9, [r];
	}
	setp.eq.u64 %q0, %a9, 0;
	@%q0 bra $DROP;
	st.u32 [%a9], %a2;
	st.u32 [%a9+4], %a4;
	st.u64 [%a9+8], %a5;
	st.u64 [%a9+16], %a6;
	st.u64 [%a9+24], %a7;
	add.u64 %a10, %a9, 32;
	{
	.param .b64 y0;
	.param .b64 y1;
	.param .b64 y2;
	st.param.b64 [y0], %a10;
	st.param.b64 [y1], %a3;
	st.param.b64 [y2], %a4;
	call.uni __gpubpf_memcpy, (y0, y1, y2);
	}
	cvt.u32.u64 %b0, %a8;
	or.b32 %b0, %b0, 0x80000000;
	COMMITSTORE.u32 [%a9+-8], %b0;
	st.param.b64 [ret], %a4;
	ret;
$DROP:
	st.param.b64 [ret], -28;
	ret;
}
`,
	// hash_find(map, key, ks, cap, ss): address of the valid slot holding key, or 0.
	"__gpubpf_hash_find": `.func (.param .b64 ret) NAME(.param .b64 m, .param .b64 k, .param .b64 ks, .param .b64 cap, .param .b64 ss)
{
	.reg .b64 %a<14>;
	.reg .b32 %b<6>;
	.reg .pred %q0;
	ld.param.u64 %a0, [m];
	ld.param.u64 %a1, [k];
	ld.param.u64 %a2, [ks];
	ld.param.u64 %a3, [cap];
	ld.param.u64 %a4, [ss];
	{
	.param .b64 r;
	.param .b64 y0;
	.param .b64 y1;
	st.param.b64 [y0], %a1;
	st.param.b64 [y1], %a2;
	call.uni (r), __gpubpf_fnv, (y0, y1);
	ld.param.b64 %a12, [r];
	}
	cvt.u32.u64 %b0, %a12;
	sub.u64 %a9, %a3, 1;
	add.u64 %a13, %a0, 256;
	mov.u64 %a7, 0;
$P:
	setp.ge.u64 %q0, %a7, %a3;
	@%q0 bra $MISS;
	add.u64 %a8, %a12, %a7;
	and.b64 %a8, %a8, %a9;
	mad.lo.u64 %a10, %a8, %a4, %a13;
	ld.acquire.SCOPE.u32 %b2, [%a10];
	setp.eq.u32 %q0, %b2, 0;
	@%q0 bra $MISS;
	setp.ne.u32 %q0, %b2, 2;
	@%q0 bra $NEXT;
	ld.u32 %b3, [%a10+4];
	setp.ne.u32 %q0, %b3, %b0;
	@%q0 bra $NEXT;
	mov.u64 %a5, 0;
$C:
	setp.ge.u64 %q0, %a5, %a2;
	@%q0 bra $HIT;
	add.u64 %a6, %a1, %a5;
	ld.u8 %b4, [%a6];
	add.u64 %a11, %a10, %a5;
	ld.u8 %b5, [%a11+8];
	setp.ne.u32 %q0, %b4, %b5;
	@%q0 bra $NEXT;
	add.u64 %a5, %a5, 1;
	bra.uni $C;
$HIT:
	st.param.b64 [ret], %a10;
	ret;
$NEXT:
	add.u64 %a7, %a7, 1;
	bra.uni $P;
$MISS:
	st.param.b64 [ret], 0;
	ret;
}
`,
	// hash_update(map, key, val, flags, ks, cap, ss, vs, max, voff).
	"__gpubpf_hash_update": `.func (.param .b64 ret) NAME(.param .b64 m, .param .b64 k, .param .b64 v, .param .b64 fl, .param .b64 ks, .param .b64 cap, .param .b64 ss, .param .b64 vs, .param .b64 max, .param .b64 voff)
{
	.reg .b64 %a<20>;
	.reg .b32 %b<4>;
	.reg .pred %q0;
	ld.param.u64 %a0, [m];
	ld.param.u64 %a1, [k];
	ld.param.u64 %a2, [v];
	ld.param.u64 %a3, [fl];
	ld.param.u64 %a4, [ks];
	ld.param.u64 %a5, [cap];
	ld.param.u64 %a6, [ss];
	ld.param.u64 %a7, [vs];
	ld.param.u64 %a8, [max];
	ld.param.u64 %a9, [voff];
	mov.u64 %a19, -22;
	setp.gt.u64 %q0, %a3, 2;
	@%q0 bra $RET;
	{
	.param .b64 r;
	.param .b64 y0;
	.param .b64 y1;
	.param .b64 y2;
	.param .b64 y3;
	.param .b64 y4;
	st.param.b64 [y0], %a0;
	st.param.b64 [y1], %a1;
	st.param.b64 [y2], %a4;
	st.param.b64 [y3], %a5;
	st.param.b64 [y4], %a6;
	call.uni (r), __gpubpf_hash_find_SC, (y0, y1, y2, y3, y4);
	ld.param.b64 %a10, [r];
	}
	setp.eq.u64 %q0, %a10, 0;
	@%q0 bra $NEW;
	mov.u64 %a19, -17;
	setp.eq.u64 %q0, %a3, 1;
	@%q0 bra $RET;
	add.u64 %a11, %a10, %a9;
	{
	.param .b64 y0;
	.param .b64 y1;
	.param .b64 y2;
	st.param.b64 [y0], %a11;
	st.param.b64 [y1], %a2;
	st.param.b64 [y2], %a7;
	call.uni __gpubpf_memcpy, (y0, y1, y2);
	}
	mov.u64 %a19, 0;
	bra.uni $RET;
$NEW:
	mov.u64 %a19, -2;
	setp.eq.u64 %q0, %a3, 2;
	@%q0 bra $RET;
	{
	.param .b64 r;
	.param .b64 y0;
	.param .b64 y1;
	st.param.b64 [y0], %a1;
	st.param.b64 [y1], %a4;
	call.uni (r), __gpubpf_fnv, (y0, y1);
	ld.param.b64 %a13, [r];
	}
	cvt.u32.u64 %b0, %a13;
	sub.u64 %a14, %a5, 1;
	add.u64 %a18, %a0, 256;
	mov.u64 %a15, 0;
	mov.u32 %b3, 0;
$P:
	setp.ge.u64 %q0, %a15, %a5;
	@%q0 bra $FULL;
	add.u64 %a16, %a13, %a15;
	and.b64 %a16, %a16, %a14;
	mad.lo.u64 %a17, %a16, %a6, %a18;
$AGAIN:
	ld.acquire.SCOPE.u32 %b1, [%a17];
	setp.eq.u32 %q0, %b1, 0;
	@%q0 bra $TRY;
	setp.eq.u32 %q0, %b1, 3;
	@%q0 bra $TRY;
	setp.eq.u32 %q0, %b1, 2;
	@%q0 bra $CMP;
	// Busy: another thread is writing this slot, possibly with our key.
	// Wait for it (a GPU thread, never the host), boundedly.
	add.u32 %b3, %b3, 1;
	setp.lt.u32 %q0, %b3, 1000000;
	@%q0 bra $AGAIN;
	bra.uni $FULL;
$CMP:
	ld.u32 %b2, [%a17+4];
	setp.ne.u32 %q0, %b2, %b0;
	@%q0 bra $NEXT;
	mov.u64 %a10, 0;
$CL:
	setp.ge.u64 %q0, %a10, %a4;
	@%q0 bra $EXISTS;
	add.u64 %a11, %a1, %a10;
	ld.u8 %b1, [%a11];
	add.u64 %a11, %a17, %a10;
	ld.u8 %b2, [%a11+8];
	setp.ne.u32 %q0, %b1, %b2;
	@%q0 bra $NEXT;
	add.u64 %a10, %a10, 1;
	bra.uni $CL;
$TRY:
	atom.SCOPE.cas.b32 %b2, [%a17], %b1, 1;
	setp.eq.u32 %q0, %b2, %b1;
	@%q0 bra $CLAIMED;
	bra.uni $AGAIN;
$NEXT:
	add.u64 %a15, %a15, 1;
	bra.uni $P;
$EXISTS:
	// A concurrent insert of the same key won: behave as an update.
	mov.u64 %a19, -17;
	setp.eq.u64 %q0, %a3, 1;
	@%q0 bra $RET;
	add.u64 %a11, %a17, %a9;
	{
	.param .b64 y0;
	.param .b64 y1;
	.param .b64 y2;
	st.param.b64 [y0], %a11;
	st.param.b64 [y1], %a2;
	st.param.b64 [y2], %a7;
	call.uni __gpubpf_memcpy, (y0, y1, y2);
	}
	mov.u64 %a19, 0;
	bra.uni $RET;
$CLAIMED:
	// Count the entry only once the slot is ours, so concurrent inserts
	// of one key never inflate the count; over maxEntries: give it back.
	atom.SCOPE.add.u64 %a12, [%a0+32], 1;
	setp.lt.u64 %q0, %a12, %a8;
	@%q0 bra $ROOM;
	red.SCOPE.add.u64 [%a0+32], -1;
	st.release.SCOPE.u32 [%a17], %b1;
	bra.uni $FULL;
$ROOM:
	st.u32 [%a17+4], %b0;
	add.u64 %a11, %a17, 8;
	{
	.param .b64 y0;
	.param .b64 y1;
	.param .b64 y2;
	st.param.b64 [y0], %a11;
	st.param.b64 [y1], %a1;
	st.param.b64 [y2], %a4;
	call.uni __gpubpf_memcpy, (y0, y1, y2);
	}
	add.u64 %a11, %a17, %a9;
	{
	.param .b64 y0;
	.param .b64 y1;
	.param .b64 y2;
	st.param.b64 [y0], %a11;
	st.param.b64 [y1], %a2;
	st.param.b64 [y2], %a7;
	call.uni __gpubpf_memcpy, (y0, y1, y2);
	}
	st.release.SCOPE.u32 [%a17], 2;
	mov.u64 %a19, 0;
	bra.uni $RET;
$FULL:
	red.SCOPE.add.u64 [%a0+24], 1;
	mov.u64 %a19, -7;
$RET:
	st.param.b64 [ret], %a19;
	ret;
}
`,
	// hash_delete(map, key, ks, cap, ss).
	"__gpubpf_hash_delete": `.func (.param .b64 ret) NAME(.param .b64 m, .param .b64 k, .param .b64 ks, .param .b64 cap, .param .b64 ss)
{
	.reg .b64 %a<8>;
	.reg .b32 %b0;
	.reg .pred %q0;
	ld.param.u64 %a0, [m];
	ld.param.u64 %a1, [k];
	ld.param.u64 %a2, [ks];
	ld.param.u64 %a3, [cap];
	ld.param.u64 %a4, [ss];
	{
	.param .b64 r;
	.param .b64 y0;
	.param .b64 y1;
	.param .b64 y2;
	.param .b64 y3;
	.param .b64 y4;
	st.param.b64 [y0], %a0;
	st.param.b64 [y1], %a1;
	st.param.b64 [y2], %a2;
	st.param.b64 [y3], %a3;
	st.param.b64 [y4], %a4;
	call.uni (r), __gpubpf_hash_find_SC, (y0, y1, y2, y3, y4);
	ld.param.b64 %a5, [r];
	}
	mov.u64 %a6, -2;
	setp.eq.u64 %q0, %a5, 0;
	@%q0 bra $RET;
	atom.SCOPE.cas.b32 %b0, [%a5], 2, 3;
	setp.ne.u32 %q0, %b0, 2;
	@%q0 bra $RET;
	red.SCOPE.add.u64 [%a0+32], -1;
	mov.u64 %a6, 0;
$RET:
	st.param.b64 [ret], %a6;
	ret;
}
`,
}
