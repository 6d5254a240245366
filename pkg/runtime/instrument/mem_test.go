package instrument

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/gpubpf/gpubpf/internal/testenv"
	"github.com/gpubpf/gpubpf/pkg/runtime/ptx"
)

// memKernel wraps one instruction (and what it needs before it) in a
// kernel with registers of every kind the forms below use.
func memKernel(isa [2]int, decls, before, ins string) string {
	return fmt.Sprintf(`.version %d.%d
.target sm_90
.address_size 64
.shared .align 8 .b8 smem[64];
.const .align 4 .u32 cvar;
.visible .entry k(.param .u64 p)
{
	.reg .pred %%p<2>;
	.reg .b16 %%h<20>;
	.reg .f32 %%f<9>;
	.reg .b32 %%r<9>;
	.reg .b64 %%rd<9>;
%s
	ld.param.u64 %%rd1, [p];
	setp.eq.s64 %%p1, %%rd1, 0;
%s
	%s
	ret;
}
`, isa[0], isa[1], decls, before, ins)
}

// metaOf is the record word a site writes: size | kind<<32.
func metaOf(size int, kind uint32) string { return hex(uint64(size) | uint64(kind)<<32) }

// TestMemAccessForms: every form of ld/ldu/st/atom/red the PTX ISA has
// (up to 8.x) is reported with its size and kind, or left alone when it
// does not touch global memory through the thread's own access. Forms
// this ptxas knows are assembled too.
func TestMemAccessForms(t *testing.T) {
	const (
		b128   = "\t.reg .b128 %q<4>;"
		policy = "\tcreatepolicy.fractional.L2::evict_last.b64 %rd3, 1.0;"
	)
	v78, v80, v81, v83, v86 := [2]int{7, 8}, [2]int{8, 0}, [2]int{8, 1}, [2]int{8, 3}, [2]int{8, 6}
	for _, c := range []struct {
		ins    string
		isa    [2]int
		decls  string // extra declarations
		before string // instructions the form needs first
		size   int    // 0: not reported
		kind   uint32
	}{
		// loads
		{ins: "ld.global.u32 %r1, [%rd1];", size: 4, kind: MemLoad},
		{ins: "ld.u8 %r1, [%rd1+3];", size: 1, kind: MemLoad}, // generic
		{ins: "ld.weak.global.s16 %h1, [%rd1];", size: 2, kind: MemLoad},
		{ins: "ld.global.nc.v2.f32 {%f1, %f2}, [%rd1];", size: 8, kind: MemLoad},
		{ins: "ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%r1, %r2, %r3, %r4}, [%rd1+16];", size: 16, kind: MemLoad},
		{ins: "ldu.global.f32 %f1, [%rd1];", size: 4, kind: MemLoad},
		{ins: "ldu.global.v4.f32 {%f1, %f2, %f3, %f4}, [%rd1];", size: 16, kind: MemLoad},
		{ins: "ld.volatile.global.u64 %rd2, [%rd1];", size: 8, kind: MemLoad},
		{ins: "ld.volatile.u32 %r1, [%rd1];", size: 4, kind: MemLoad},
		{ins: "ld.relaxed.gpu.global.u32 %r1, [%rd1];", size: 4, kind: MemLoad},
		{ins: "ld.relaxed.gpu.global.L2::128B.u32 %r1, [%rd1];", size: 4, kind: MemLoad},
		{ins: "ld.acquire.sys.global.u32 %r1, [%rd1];", size: 4, kind: MemLoad},
		{ins: "ld.acquire.gpu.u64 %rd2, [%rd1];", size: 8, kind: MemLoad},
		{ins: "ld.global.L1::no_allocate.f32 %f1, [%rd1];", size: 4, kind: MemLoad},
		{ins: "ld.global.L1::evict_last.f32 %f1, [%rd1];", size: 4, kind: MemLoad},
		{ins: "ld.global.L2::128B.f32 %f1, [%rd1];", size: 4, kind: MemLoad},
		{ins: "ld.global.cs.f32 %f1, [%rd1];", size: 4, kind: MemLoad},
		{ins: "ld.global.L2::cache_hint.u32 %r1, [%rd1], %rd3;", before: policy, size: 4, kind: MemLoad},
		{ins: "ld.global.b128 %q1, [%rd1];", isa: v83, decls: b128, size: 16, kind: MemLoad},
		{ins: "ld.mmio.relaxed.sys.global.u32 %r1, [%rd1];", isa: v83, size: 4, kind: MemLoad},
		{ins: "ld.global.u32 %r1, [%rd1].unified;", isa: v80, size: 4, kind: MemLoad},
		// stores
		{ins: "st.global.u32 [%rd1], %r1;", size: 4, kind: MemStore},
		{ins: "st.u16 [%rd1+-2], %h1;", size: 2, kind: MemStore}, // generic
		{ins: "st.global.v4.f32 [%rd1], {%f1, %f2, %f3, %f4};", size: 16, kind: MemStore},
		{ins: "st.volatile.global.u32 [%rd1], %r1;", size: 4, kind: MemStore},
		{ins: "st.release.gpu.global.u32 [%rd1], %r1;", size: 4, kind: MemStore},
		{ins: "st.relaxed.sys.u64 [%rd1], %rd2;", size: 8, kind: MemStore},
		{ins: "st.global.wt.f32 [%rd1], %f1;", size: 4, kind: MemStore},
		{ins: "st.global.L1::no_allocate.b32 [%rd1], %r1;", size: 4, kind: MemStore},
		{ins: "st.global.L2::cache_hint.b32 [%rd1], %r1, %rd3;", before: policy, size: 4, kind: MemStore},
		{ins: "st.global.b128 [%rd1], %q1;", isa: v83, decls: b128, size: 16, kind: MemStore},
		// atomics: atom (address operand 1), red (operand 0)
		{ins: "atom.global.add.u32 %r1, [%rd1], 1;", size: 4, kind: MemAtomic},
		{ins: "atom.add.u64 %rd2, [%rd1], 1;", size: 8, kind: MemAtomic}, // generic
		{ins: "atom.global.cas.b32 %r1, [%rd1], %r2, %r3;", size: 4, kind: MemAtomic},
		{ins: "atom.global.cas.b64 %rd2, [%rd1], %rd3, %rd4;", size: 8, kind: MemAtomic},
		{ins: "atom.cas.b16 %h1, [%rd1], %h2, %h3;", size: 2, kind: MemAtomic},
		{ins: "atom.global.exch.b32 %r1, [%rd1], %r2;", size: 4, kind: MemAtomic},
		{ins: "atom.acq_rel.sys.global.exch.b64 %rd2, [%rd1], %rd3;", size: 8, kind: MemAtomic},
		{ins: "atom.relaxed.gpu.global.add.f32 %f1, [%rd1], %f2;", size: 4, kind: MemAtomic},
		{ins: "atom.global.cta.max.s32 %r1, [%rd1], %r2;", size: 4, kind: MemAtomic},
		{ins: "atom.global.add.noftz.f16x2 %r1, [%rd1], %r2;", size: 4, kind: MemAtomic},
		{ins: "atom.global.add.noftz.bf16 %h1, [%rd1], %h2;", size: 2, kind: MemAtomic},
		{ins: "atom.global.add.L2::cache_hint.u32 %r1, [%rd1], 1, %rd3;", before: policy, size: 4, kind: MemAtomic},
		{ins: "atom.global.v4.f32.add {%f1, %f2, %f3, %f4}, [%rd1], {%f5, %f6, %f7, %f8};", isa: v81, size: 16, kind: MemAtomic},
		{ins: "atom.global.v8.f16.max.noftz {%h1, %h2, %h3, %h4, %h5, %h6, %h7, %h8}, [%rd1], {%h9, %h10, %h11, %h12, %h13, %h14, %h15, %h16};", isa: v81, size: 16, kind: MemAtomic},
		{ins: "atom.global.cas.b128 %q1, [%rd1], %q2, %q3;", isa: v83, decls: b128, size: 16, kind: MemAtomic},
		{ins: "atom.global.exch.b128 %q1, [%rd1], %q2;", isa: v83, decls: b128, size: 16, kind: MemAtomic},
		{ins: "red.global.add.u32 [%rd1], 1;", size: 4, kind: MemAtomic},
		{ins: "red.add.u64 [%rd1], %rd2;", size: 8, kind: MemAtomic}, // generic
		{ins: "red.relaxed.gpu.global.max.s32 [%rd1], %r1;", size: 4, kind: MemAtomic},
		{ins: "red.global.add.noftz.f16x2 [%rd1], %r1;", size: 4, kind: MemAtomic},
		{ins: "red.global.add.L2::cache_hint.u64 [%rd1], 1, %rd3;", before: policy, size: 8, kind: MemAtomic},
		{ins: "red.global.v2.f32.add [%rd1], {%f1, %f2};", isa: v81, size: 8, kind: MemAtomic},
		// not global accesses of the thread
		{ins: "ld.shared.u32 %r1, [smem];"},
		{ins: "ld.shared::cta.u32 %r1, [smem+4];"},
		{ins: "ld.shared::cluster.u32 %r1, [%rd1];"},
		{ins: "ld.local.u32 %r1, [%rd1];"},
		{ins: "ld.param.u64 %rd2, [p];"},
		{ins: "ld.param::entry.u64 %rd2, [p];", isa: v83},
		{ins: "ld.const.u32 %r1, [cvar];"},
		{ins: "st.shared.u32 [smem], %r1;"},
		{ins: "st.local.u32 [%rd1], %r1;"},
		{ins: "st.async.shared::cluster.mbarrier::complete_tx::bytes.u32 [%r1], %r2, [%r3];", isa: v81},
		{ins: "st.bulk.weak.shared::cta [%rd1], 64, 0;", isa: v86},
		{ins: "atom.shared.add.u32 %r1, [smem], 1;"},
		{ins: "atom.shared::cta.add.u32 %r1, [smem], 1;"},
		{ins: "atom.shared::cluster.add.u32 %r1, [%rd1], 1;"},
		{ins: "red.shared.add.u32 [smem], 1;"},
		{ins: "red.async.relaxed.cluster.shared::cluster.mbarrier::complete_tx::bytes.add.u32 [%r1], %r2, [%r3];", isa: v81},
		{ins: "prefetch.global.L2 [%rd1];"},
		{ins: "prefetchu.L1 [%rd1];"},
		{ins: "applypriority.global.L2::evict_normal [%rd1], 128;"},
		{ins: "discard.global.L2 [%rd1], 128;"},
		{ins: "cp.async.ca.shared.global [smem], [%rd1], 4;"},
		{ins: "multimem.ld_reduce.relaxed.sys.global.add.u32 %r1, [%rd1];", isa: v81},
	} {
		isa := c.isa
		if isa == [2]int{} {
			isa = v78
		}
		name := c.ins[:strings.IndexByte(c.ins, ' ')]
		t.Run(name, func(t *testing.T) {
			src := memKernel(isa, c.decls, c.before, c.ins)
			for _, pred := range []bool{false, true} {
				in := src
				if pred {
					in = memKernel(isa, c.decls, c.before, "@%p1 "+c.ins)
				}
				r, err := Instrument(in, Request{MemAccess: probe("pm", true)})
				if err != nil {
					t.Fatal(err)
				}
				want := 0
				if c.size > 0 {
					want = 1
				}
				if r.Sites.Mem != want {
					t.Fatalf("%s: %d memory sites, want %d\n%s", c.ins, r.Sites.Mem, want, r.PTX)
				}
				if want == 0 {
					if strings.Contains(r.PTX, memMetaReg) {
						t.Fatalf("%s: a record was written for it:\n%s", c.ins, r.PTX)
					}
					continue
				}
				meta := "mov.b64\t" + memMetaReg + ", " + metaOf(c.size, c.kind) + ";"
				if !strings.Contains(r.PTX, meta) {
					t.Fatalf("%s: clone lacks %q (size %d, kind %d):\n%s", c.ins, meta, c.size, c.kind, r.PTX)
				}
				// The address comes from the address operand, taken
				// before the access; a predicated access skips the probe
				// where it did not run.
				if !regexp.MustCompile(`mov\.b64\t%gpubpf_maddr, %rd1;\n(\tadd\.s64\t%gpubpf_maddr, %gpubpf_maddr, -?\d+;\n)?\t(@%p1 )?` + regexp.QuoteMeta(strings.Fields(c.ins)[0])).MatchString(r.PTX) {
					t.Errorf("%s: address not taken from [%%rd1...] just before the access:\n%s", c.ins, r.PTX)
				}
				if pred && !strings.Contains(r.PTX, "@!%p1 bra\t$gpubpf_L1;") {
					t.Errorf("%s: predicated access does not skip its probe:\n%s", c.ins, r.PTX)
				}
			}
			if ptxasKnows(t, isa) {
				if _, err := runPtxas(t, src, "sm_90"); err != nil {
					t.Fatalf("test case %s does not assemble even uninstrumented", c.ins)
				}
				r, err := Instrument(src, Request{MemAccess: reaching("pm", 24)})
				if err != nil {
					t.Fatal(err)
				}
				assemble(t, r.PTX, "sm_90")
			}
		})
	}
}

// ptxasKnows reports whether a ptxas is here that assembles PTX ISA isa.
func ptxasKnows(t *testing.T, isa [2]int) bool {
	if testenv.Lookup("ptxas") == "" {
		return false
	}
	return !ptx.VersionLess(ptx.PtxasMaxISA(testenv.Ptxas(t)), isa)
}

// TestMemAccessAtomicsFixture: the kernels of a real nvcc build with global
// and shared atomics, vector, volatile, cache-hinted, acquire/release and
// .nc accesses get exactly the sites their PTX has (counted by hand in
// testdata/atomics.cu), each with its size and kind, and assemble.
func TestMemAccessAtomicsFixture(t *testing.T) {
	src := read(t, "testdata/atomics_cuda118.ptx")
	r, err := Instrument(src, Request{MemAccess: reaching("pm", 24), Globals: map[string]uint64{"d_total": 0x7f1200000000}})
	if err != nil {
		t.Fatal(err)
	}
	ld, st, at := func(n int) string { return metaOf(n, MemLoad) }, func(n int) string { return metaOf(n, MemStore) }, func(n int) string { return metaOf(n, MemAtomic) }
	want := map[string][]string{
		// red.global.add.u32 as nvcc writes it: atom with the result unused
		"_Z4bumpPjj": {at(4)},
		// __ldg, the global histogram atomic, atomicAdd_system on d_total
		// (aliased: its address is the original's); the shared-memory
		// array and its atomics are not global.
		"_Z9histogramPKjPji": {ld(4), at(4), at(8)},
		"_Z5mixedPfPdPiPyP7__half2PVii": {
			at(4), at(8), at(4), at(4), at(4), at(8), at(8), // f32, f64, cas.b32, exch, max, cas.b64, cta add u64
			at(4),               // generic atom.add.noftz.f16x2 (inline asm in cuda_fp16.h)
			ld(4), st(4), ld(4), // volatile flag loop
			ld(4), st(4), // __ldcs/__stcs
			ld(16), st(16), // __ldg float4, float4 store
			ld(4), st(4), ld(4), ld(4), ld(4), ld(4), // acquire, release, relaxed L2::128B, L1::no_allocate, L2::cache_hint, ldu
			at(4), at(8), // red.global.add.u32, red.relaxed...L2::cache_hint.u64
		},
	}
	m, err := ptx.Parse(r.PTX)
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	metaRe := regexp.MustCompile(`mov\.b64\t` + regexp.QuoteMeta(memMetaReg) + `, (0x[0-9a-f]+);`)
	for fn, metas := range want {
		f := m.Funcs()[fn]
		if f == nil {
			t.Fatalf("clone lacks %s", fn)
		}
		var got []string
		for _, s := range f.Body {
			for _, mm := range metaRe.FindAllStringSubmatch(s.String(), -1) {
				got = append(got, mm[1])
			}
		}
		if !slices.Equal(got, metas) {
			t.Errorf("%s: records\n%v\nwant\n%v", fn, got, metas)
		}
		total += len(metas)
	}
	if r.Sites.Mem != total {
		t.Errorf("%d memory sites, want %d", r.Sites.Mem, total)
	}
	assemble(t, r.PTX, "sm_80")
}
