package instrument

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/gpubpf/gpubpf/internal/testenv"
	"github.com/gpubpf/gpubpf/pkg/runtime/ptx"
)

func read(t testing.TB, f string) string {
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// probe returns a probe like the compiler's: it reads ctx when usesCtx.
func probe(name string, usesCtx bool) *Probe {
	body := "\tmov.u64 %t1, 0;\n"
	if usesCtx {
		body = "\tld.param.b64 %t1, [c];\n\tld.u64 %t1, [%t1];\n"
	}
	return &Probe{Func: name, UsesCtx: usesCtx, PTXVersion: [2]int{7, 0}, PTX: ".func (.param .b64 r) " + name + "(.param .b64 c)\n{\n\t.reg .b64 %t<2>;\n" + body + "\tst.param.b64 [r], %t1;\n\tret;\n}\n"}
}

var multiKernels = []string{"_Z5scalePfi", "_Z4fillPiii", "_Z4axpyIfEvT_PKS0_PS0_i", "_Z4axpyIdEvT_PKS0_PS0_i", "_ZN2ns6reduceEPKfPfi"}

func TestMatch(t *testing.T) {
	for _, c := range []struct {
		pats []string
		want []string
	}{
		{[]string{"scale"}, []string{"_Z5scalePfi"}},
		{[]string{"_Z4fillPiii"}, []string{"_Z4fillPiii"}},
		{[]string{"axpy"}, []string{"_Z4axpyIfEvT_PKS0_PS0_i", "_Z4axpyIdEvT_PKS0_PS0_i"}},
		{[]string{"void axpy<float>(float, float const*, float*, int)"}, []string{"_Z4axpyIfEvT_PKS0_PS0_i"}},
		{[]string{"ns::reduce"}, []string{"_ZN2ns6reduceEPKfPfi"}},
		{[]string{"*e"}, []string{"_Z5scalePfi", "_ZN2ns6reduceEPKfPfi"}},
		{[]string{"ns::*", "fill"}, []string{"_Z4fillPiii", "_ZN2ns6reduceEPKfPfi"}},
		{[]string{"_Z4axpy*"}, []string{"_Z4axpyIfEvT_PKS0_PS0_i", "_Z4axpyIdEvT_PKS0_PS0_i"}},
	} {
		got, _ := Match(c.pats, multiKernels)
		if !slices.Equal(got, c.want) {
			t.Errorf("Match(%q) = %v, want %v", c.pats, got, c.want)
		}
	}
	got, closest := Match([]string{"scal"}, multiKernels)
	if len(got) != 0 || len(closest) == 0 || closest[0] != "_Z5scalePfi" {
		t.Errorf("Match(scal) = %v, closest %v", got, closest)
	}
	_, err := Instrument(read(t, "../ptx/testdata/multi_cuda118.ptx"), Request{Kernels: []string{"filll"}, Entry: probe("p", false)})
	if err == nil || !strings.Contains(err.Error(), "closest: fill (_Z4fillPiii)") {
		t.Errorf("error for a typo: %v", err)
	}
}

func TestExtractKeepsOnlyWhatIsReferenced(t *testing.T) {
	m, err := ptx.Parse(read(t, "../ptx/testdata/multi_cuda118.ptx"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := Extract(m, []string{"_Z5scalePfi"}, false)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.KernelNames(), []string{"_Z5scalePfi"}) || !slices.Equal(c.FuncNames(), []string{"_Z6helperf"}) {
		t.Errorf("kernels %v funcs %v", c.KernelNames(), c.FuncNames())
	}
	if len(c.Vars) != 1 || c.Vars[0].Name != "g_arr" {
		t.Errorf("vars %+v", c.Vars)
	}
	out := c.String()
	for _, gone := range []string{"_Z4fillPiii", "axpy", "reduce"} {
		if strings.Contains(out, gone) {
			t.Errorf("clone still holds %s", gone)
		}
	}
	if _, err := Extract(m, []string{"nope"}, false); err == nil {
		t.Error("unknown kernel accepted")
	}
}

func TestAliasGlobals(t *testing.T) {
	src := read(t, "../ptx/testdata/vec_add_cuda118.ptx")
	g := map[string]uint64{"d_N": 0x7f1200000000, "d_counter": 0x7f1200000100}
	r, err := Instrument(src, Request{Kernels: []string{"vectorAdd"}, Exit: probe("p", false), Globals: g})
	if err != nil {
		t.Fatal(err)
	}
	out := r.PTX
	for _, bad := range []string{".const .align 4 .u32 d_N", "d_counter;", "[d_N]", "ld.const"} {
		if strings.Contains(out, bad) {
			t.Errorf("clone still has %q:\n%s", bad, out)
		}
	}
	for _, re := range []string{
		`mov\.u64\s+(%gpubpf_rd\d+), 0x7f1200000000;\n\s*ld\.global\.u32\s+%r6, \[%gpubpf_rd\d+\];`,
		`mov\.u64\s+%rd11, 0x7f1200000100;\n\s*atom\.global\.add\.u64\s+%rd12, \[%rd11\], 1;`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("clone lacks %s:\n%s", re, out)
		}
	}
	if r.Sites.Globals != 2 || len(r.Aliased) != 2 {
		t.Errorf("sites %+v aliased %v", r.Sites, r.Aliased)
	}
	// A referenced variable without an address is an error, naming it.
	_, err = Instrument(src, Request{Exit: probe("p", false), Globals: map[string]uint64{"d_N": 1}})
	if err == nil || !strings.Contains(err.Error(), "d_counter") || !strings.Contains(err.Error(), "cuModuleGetGlobal") {
		t.Errorf("missing address: %v", err)
	}
}

func TestAliasOffsetsConstPointersAndExtern(t *testing.T) {
	src := `.version 7.8
.target sm_80
.address_size 64
.extern .global .align 4 .u32 ext;
.const .align 4 .b8 tab[16] = {1,0,0,0, 2,0,0,0, 3,0,0,0, 4,0,0,0};
.global .align 4 .b8 arr[64];
.global .align 1 .b8 $str[3] = {104, 105, 0};
.visible .entry k(.param .u64 out)
{
	.reg .b32 %r<8>;
	.reg .b64 %rd<9>;
	ld.global.u32 %r1, [arr+8];
	ld.const.u32 %r2, [tab+-4+8];
	mov.u64 %rd1, tab;
	cvta.const.u64 %rd2, %rd1;
	ld.u32 %r3, [%rd2+4];
	mov.u64 %rd3, tab;
	ld.const.u32 %r4, [%rd3+12];
	cvta.global.u64 %rd4, arr;
	st.u32 [%rd4], %r1;
	ld.global.u32 %r5, [ext];
	mov.u64 %rd5, $str;
	red.global.add.u32 [arr+4], 1;
	ret;
}
`
	g := map[string]uint64{"ext": 0x1000, "tab": 0x2000, "arr": 0x3000}
	r, err := Instrument(src, Request{Exit: probe("p", false), Globals: g})
	if err != nil {
		t.Fatal(err)
	}
	out := r.PTX
	for _, want := range []string{
		"mov.u64\t%gpubpf_rd1, 0x3008;\n\tld.global.u32\t%r1, [%gpubpf_rd1];",
		"ld.global.u32\t%r2, [%gpubpf_rd2];",
		"mov.u64\t%rd1, 0x2000;",
		"mov.b64\t%rd2, %rd1;", // cvta.const of an aliased address: already generic
		"ld.global.u32\t%r4, [%rd3+12];",
		"mov.u64\t%rd4, 0x3000;", // cvta.global of the symbol
		"ld.global.u32\t%r5, [%gpubpf_rd",
		"red.global.add.u32\t[%gpubpf_rd",
		".global .align 1 .b8 $str[3]", // initialised data without an address: own copy
	} {
		if !strings.Contains(out, want) {
			t.Errorf("clone lacks %q", want)
		}
	}
	if strings.Contains(out, ".extern .global") || strings.Contains(out, "tab[16]") || strings.Contains(out, "arr[64]") {
		t.Errorf("aliased definitions kept:\n%s", out)
	}
	if !regexp.MustCompile(`mov\.u64\s+%gpubpf_rd2, 0x2004;`).MatchString(out) {
		t.Errorf("offset -4+8 not folded:\n%s", out)
	}
	if !slices.Equal(r.Fresh, []string{"$str"}) {
		t.Errorf("fresh %v", r.Fresh)
	}
	assemble(t, out, "sm_80")
}

func TestEntryCtxLayout(t *testing.T) {
	// clang's structArg(P{float,float,double}, char, short, double*):
	// kernelParams layout 0..15 struct, 16 char, 18 short, 24 pointer.
	r, err := Instrument(read(t, "../ptx/testdata/clang14_kernels.ptx"), Request{Kernels: []string{"structArg"}, Entry: probe("pe", true)})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		".local .align 16 .b8 __gpubpf_ctx[32];",
		"[_Z9structArg1PcsPd_param_0+0]", "st.local.b64\t[__gpubpf_ctx+0]",
		"[_Z9structArg1PcsPd_param_0+8]", "st.local.b64\t[__gpubpf_ctx+8]",
		"ld.param.b8\t%gpubpf_h", "st.local.b8\t[__gpubpf_ctx+16]",
		"ld.param.b16\t%gpubpf_h", "st.local.b16\t[__gpubpf_ctx+18]",
		"st.local.b64\t[__gpubpf_ctx+24]",
		"cvta.local.u64\t%gpubpf_ctx, %gpubpf_ctx;\n\t{\n\t\t.param .b64 gpubpf_arg;",
		"call\t(gpubpf_ret), pe, (gpubpf_arg);",
	} {
		if !strings.Contains(r.PTX, want) {
			t.Errorf("clone lacks %q:\n%s", want, r.PTX)
		}
	}
	if r.Sites.Entry != 1 || r.Sites.Exit != 0 {
		t.Errorf("sites %+v", r.Sites)
	}
	assemble(t, r.PTX, "sm_80")
}

const exitsSrc = `.version 7.8
.target sm_80
.address_size 64
.func (.param .b32 rv) helper(.param .b32 a)
{
	.reg .pred %p<2>;
	.reg .b32 %r<3>;
	ld.param.u32 %r1, [a];
	setp.eq.s32 %p1, %r1, 0;
	@%p1 exit;
	st.param.b32 [rv], %r1;
	ret;
}
.visible .entry k(.param .u32 n)
{
	.reg .pred %p<3>;
	.reg .b32 %r<4>;
	ld.param.u32 %r1, [n];
	setp.eq.s32 %p1, %r1, 0;
	@%p1 ret;
	setp.eq.s32 %p2, %r1, 1;
	@!%p2 bra $L_out;
	{
		.param .b32 pa;
		.param .b32 pr;
		st.param.b32 [pa], %r1;
		call.uni (pr), helper, (pa);
		ld.param.b32 %r2, [pr];
	}
$L_out:
	ret;
}
`

func TestExitProbe(t *testing.T) {
	r, err := Instrument(exitsSrc, Request{Exit: probe("px", false)})
	if err != nil {
		t.Fatal(err)
	}
	m, err := ptx.Parse(r.PTX)
	if err != nil {
		t.Fatal(err)
	}
	k := m.Funcs()["k"]
	// Render the kernel compactly to check the control flow around exits.
	var lines []string
	for _, s := range k.Body {
		lines = append(lines, s.String())
	}
	body := strings.Join(lines, "\n")
	for _, want := range []string{
		// @%p1 ret: skip the probe and the ret where the predicate is false.
		"@!%p1 bra\t$gpubpf_L1;\n{\n.param .b64 gpubpf_arg;\n.param .b64 gpubpf_ret;\nst.param.b64\t[gpubpf_arg], 0;\ncall\t(gpubpf_ret), px, (gpubpf_arg);\n}\nret;\n$gpubpf_L1:",
		// the branch target label still precedes the final ret's probe.
		"$L_out:\n{\n.param .b64 gpubpf_arg;",
		// the early return (a branch to a bare ret) is a predicated ret,
		// probed in line: lanes leaving early are not held at $L_out.
		"@%p2 bra\t$gpubpf_L2;\n{\n.param .b64 gpubpf_arg;\n.param .b64 gpubpf_ret;\nst.param.b64\t[gpubpf_arg], 0;\ncall\t(gpubpf_ret), px, (gpubpf_arg);\n}\nret;\n$gpubpf_L2:",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("kernel lacks\n%s\n---- got\n%s", want, body)
		}
	}
	if r.Sites.Exit != 4 { // three rets in k (one the early return's own), one exit in helper
		t.Errorf("exit sites %d, want 4", r.Sites.Exit)
	}
	h := m.Funcs()["helper"]
	calls := 0
	for _, s := range h.Body {
		if s.Kind == ptx.Instr && s.Base() == "call" {
			calls++
		}
	}
	if calls != 1 {
		t.Errorf("helper: %d probe calls, want 1 (before exit, not before ret)", calls)
	}
	assemble(t, r.PTX, "sm_80")
}

const stubSrc = `.version 7.8
.target sm_80
.address_size 64
.extern .func __bpftime_cuda__kernel_trace
(
)
;
.visible .entry withStub(.param .u64 p)
{
	.reg .b64 %rd<2>;
	ld.param.u64 %rd1, [p];
	{ // callseq 0, 0
	call.uni __bpftime_cuda__kernel_trace, ();
	} // callseq 0
	ret;
}
.visible .entry plain(.param .u64 p)
{
	ret;
}
`

func TestStubRedirection(t *testing.T) {
	r, err := Instrument(stubSrc, Request{Entry: probe("pe", true)})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(r.PTX, "__bpftime_cuda__kernel_trace") {
		t.Errorf("stub still referenced:\n%s", r.PTX)
	}
	if r.Sites.Stub != 1 || r.Sites.Entry != 1 {
		t.Errorf("sites %+v: want the stub redirected and entry only in plain", r.Sites)
	}
	m, _ := ptx.Parse(r.PTX)
	calls := func(k string) int {
		n := 0
		for _, s := range m.Funcs()[k].Body {
			if s.Kind == ptx.Instr && s.Base() == "call" && slices.Contains(s.Operands, "pe") {
				n++
			}
		}
		return n
	}
	if calls("withStub") != 1 || calls("plain") != 1 {
		t.Errorf("probe calls: withStub %d plain %d, want 1 and 1\n%s", calls("withStub"), calls("plain"), r.PTX)
	}
	assemble(t, r.PTX, "sm_80")
}

func TestMemAccess(t *testing.T) {
	src := `.version 7.8
.target sm_80
.address_size 64
.visible .entry k(.param .u64 p)
{
	.reg .pred %p<2>;
	.reg .f32 %f<5>;
	.reg .b32 %r<3>;
	.reg .b64 %rd<4>;
	ld.param.u64 %rd1, [p];
	ld.global.v4.f32 {%f1, %f2, %f3, %f4}, [%rd1+16];
	ld.global.nc.u64 %rd1, [%rd1];
	setp.eq.s64 %p1, %rd1, 0;
	@%p1 st.u8 [%rd1+-1], %r1;
	ld.shared.u32 %r2, [%rd2];
	ld.local.u32 %r2, [%rd2];
	atom.global.add.u32 %r2, [%rd1], 1;
	ret;
}
`
	r, err := Instrument(src, Request{MemAccess: probe("pm", true)})
	if err != nil {
		t.Fatal(err)
	}
	if r.Sites.Mem != 4 {
		t.Errorf("mem sites %d, want 4 (v4 load, nc load, predicated store, atomic)", r.Sites.Mem)
	}
	for _, want := range []string{
		"add.s64\t%gpubpf_maddr, %gpubpf_maddr, 16;\n\tld.global.v4.f32",
		"mov.b64\t%gpubpf_mmeta, 0x10;", // 16 bytes, load
		// the address is taken before the load overwrites %rd1
		"mov.b64\t%gpubpf_maddr, %rd1;\n\tld.global.nc.u64\t%rd1, [%rd1];\n\tst.local.b64\t[__gpubpf_mem], %gpubpf_maddr;",
		"add.s64\t%gpubpf_maddr, %gpubpf_maddr, -1;\n\t@%p1 st.u8\t[%rd1+-1], %r1;\n\t@!%p1 bra\t$gpubpf_L1;",
		"mov.b64\t%gpubpf_mmeta, 0x100000001;", // 1 byte, store
		"mov.b64\t%gpubpf_mmeta, 0x200000004;", // 4 bytes, atomic
	} {
		if !strings.Contains(r.PTX, want) {
			t.Errorf("clone lacks %q:\n%s", want, r.PTX)
		}
	}
	assemble(t, r.PTX, "sm_80")
}

func TestFixHeader(t *testing.T) {
	src := read(t, "../ptx/testdata/vec_add_cuda118.ptx") // .version 7.8
	p := probe("p", false)
	p.PTXVersion = [2]int{8, 0}
	r, err := Instrument(src, Request{Exit: p, MaxPTX: [2]int{8, 3}})
	if err != nil || r.Version != [2]int{8, 0} || !strings.HasPrefix(r.PTX, ".version 8.0\n") {
		t.Fatalf("version %v, %v", r, err)
	}
	p.PTXVersion = [2]int{7, 0}
	if r, err = Instrument(src, Request{Exit: p, MaxPTX: [2]int{8, 3}}); err != nil || r.Version != [2]int{7, 8} {
		t.Errorf("version must not drop below the module's: %v %v", r.Version, err)
	}
	p.PTXVersion = [2]int{9, 0}
	if _, err = Instrument(src, Request{Exit: p, MaxPTX: [2]int{8, 3}}); err == nil || !strings.Contains(err.Error(), "at most 8.3") {
		t.Errorf("over the driver's limit: %v", err)
	}
}

func TestPassDump(t *testing.T) {
	var passes []string
	_, err := Instrument(read(t, "../ptx/testdata/vec_add_cuda118.ptx"), Request{Exit: probe("p", false), Globals: map[string]uint64{"d_N": 1, "d_counter": 2},
		Dump: func(d PassDump) {
			passes = append(passes, d.Pass)
			if d.Pass == "exit" && (d.Input == d.Output || !strings.Contains(d.JSON(), `"pass":"exit"`)) {
				t.Errorf("exit dump: %s", d.JSON())
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if len(passes) != 10 {
		t.Errorf("passes %v", passes)
	}
}

// allFixtures returns every PTX fixture (committed and from
// $GPUBPF_PTX_FIXTURES).
func allFixtures(t testing.TB) []string {
	fs, _ := filepath.Glob("../ptx/testdata/*.ptx")
	if d := os.Getenv("GPUBPF_PTX_FIXTURES"); d != "" {
		more, _ := filepath.Glob(filepath.Join(d, "*.ptx"))
		fs = append(fs, more...)
	}
	return fs
}

// TestInstrumentedFixturesAssemble instruments every kernel of every
// fixture with all probes and aliased globals and has ptxas assemble it.
func TestInstrumentedFixturesAssemble(t *testing.T) {
	testenv.Ptxas(t)
	for _, f := range allFixtures(t) {
		t.Run(filepath.Base(f), func(t *testing.T) {
			src := read(t, f)
			m, err := ptx.Parse(src)
			if err != nil {
				t.Fatal(err)
			}
			g := map[string]uint64{}
			addr := uint64(0x7f3400000000)
			for n := range m.Vars() {
				g[n] = addr
				addr += 0x1000
			}
			// Probes that read past the parameters and the memory
			// record (the exit one as far as a ctx pointer the compiler
			// lost may go): zero fills, unrolled and looped, in every
			// kernel and in .funcs that exit.
			r, err := InstrumentModule(m, Request{Entry: reaching("pe", 72), Exit: reaching("px", 4096), MemAccess: reaching("pm", 24), Globals: g})
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Kernels) != len(m.Entries()) {
				t.Errorf("instrumented %d of %d kernels", len(r.Kernels), len(m.Entries()))
			}
			arch := "sm_80"
			for _, tg := range m.Target {
				if strings.HasPrefix(tg, "sm_") {
					arch = tg
				}
			}
			if !lowerFor(t, src, arch) {
				return
			}
			assemble(t, r.PTX, arch)
		})
	}
}

// lowerFor reports whether this ptxas accepts the module as is or with its
// .version lowered to the newest ISA it knows (what CI's CUDA 11.8 needs
// for CUDA 13's PTX); if the original does not assemble even so, the
// module uses newer features and the check is skipped.
func lowerFor(t *testing.T, src, arch string) bool {
	out, err := runPtxas(t, lower(t, src), arch)
	if err != nil {
		t.Logf("skipped: the uninstrumented module does not assemble with this ptxas either: %s", out)
		return false
	}
	return true
}

func lower(t testing.TB, src string) string {
	max := ptx.PtxasMaxISA(testenv.Ptxas(t))
	re := regexp.MustCompile(`(?m)^\.version (\d+)\.(\d+)`)
	return re.ReplaceAllStringFunc(src, func(v string) string {
		have, _ := ptx.ParseVersion(strings.TrimPrefix(v, ".version "))
		if max != [2]int{} && ptx.VersionLess(max, have) {
			return fmt.Sprintf(".version %d.%d", max[0], max[1])
		}
		return v
	})
}

func runPtxas(t testing.TB, src, arch string) (string, error) {
	f := filepath.Join(t.TempDir(), "m.ptx")
	if err := os.WriteFile(f, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(testenv.Ptxas(t), "-arch="+arch, "-o", f+".cubin", f).CombinedOutput()
	return string(out), err
}

// assemble fails the test unless ptxas accepts the PTX.
func assemble(t *testing.T, src, arch string) {
	t.Helper()
	if testenv.Lookup("ptxas") == "" && !testenv.InCI() {
		return // the text checks above still ran
	}
	if out, err := runPtxas(t, lower(t, src), arch); err != nil {
		t.Fatalf("ptxas rejects the instrumented PTX: %v\n%s\n%s", err, out, numbered(src))
	}
}

func numbered(s string) string {
	ls := strings.Split(s, "\n")
	for i := range ls {
		ls[i] = fmt.Sprintf("%4d %s", i+1, ls[i])
	}
	return strings.Join(ls, "\n")
}

// The memory probe sees the application's global accesses only: the read of
// a __constant__ that aliasing turned into ld.global is not one of them.
func TestMemAccessSkipsAliasedConstants(t *testing.T) {
	r, err := Instrument(read(t, "../ptx/testdata/vec_add_cuda118.ptx"), Request{MemAccess: probe("pm", true),
		Globals: map[string]uint64{"d_N": 0x7f1200000000, "d_counter": 0x7f1200000100}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Sites.Mem != 4 || r.Sites.Globals != 2 {
		t.Errorf("sites %+v, want 4 memory sites (A, B, C, the atomic on d_counter) and 2 aliased references", r.Sites)
	}
	assemble(t, r.PTX, "sm_80")
}

func TestSkippedKernel(t *testing.T) {
	src := ".version 7.8\n.target sm_80\n.address_size 64\n.visible .entry good(.param .u64 a)\n{\n\tret;\n}\n.visible .entry odd(.param .texref t)\n{\n\tret;\n}\n"
	r, err := Instrument(src, Request{Entry: probe("pe", true)})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.Kernels, []string{"good"}) || !strings.Contains(r.Skipped["odd"], "kernelParams layout") {
		t.Errorf("kernels %v skipped %v", r.Kernels, r.Skipped)
	}
	// Without a ctx probe nothing needs the layout.
	if r, err = Instrument(src, Request{Entry: probe("pe", false)}); err != nil || len(r.Kernels) != 2 {
		t.Errorf("kernels %v, %v", r.Kernels, err)
	}
}

// ResolveGlobals is asked once for exactly the variables the clone uses,
// and its answer is what gets aliased.
func TestResolveGlobals(t *testing.T) {
	src := read(t, "../ptx/testdata/vec_add_cuda118.ptx")
	var asked [][]string
	r, err := Instrument(src, Request{Kernels: []string{"vectorAdd"}, Exit: probe("p", false),
		ResolveGlobals: func(names []string) (map[string]uint64, error) {
			asked = append(asked, append([]string(nil), names...))
			return map[string]uint64{"d_N": 0x7f1200000000, "d_counter": 0x7f1200000100}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	if len(asked) != 1 || strings.Join(asked[0], ",") != "d_N,d_counter" {
		t.Errorf("asked for %v, want once for [d_N d_counter]", asked)
	}
	if len(r.Aliased) != 2 || !strings.Contains(r.PTX, "0x7f1200000100") {
		t.Errorf("aliased %v", r.Aliased)
	}
	_, err = Instrument(src, Request{Kernels: []string{"vectorAdd"}, Exit: probe("p", false),
		ResolveGlobals: func([]string) (map[string]uint64, error) { return nil, errors.New("agent gone") }})
	if err == nil || !strings.Contains(err.Error(), "agent gone") {
		t.Errorf("a failing lookup gave %v", err)
	}
}

// TestSiteTime: a pasted probe that asks for its site's time gets a clock
// read placed before the guard of a predicated exit, so the lanes that
// leave early read it where they leave, and the register is declared.
func TestSiteTime(t *testing.T) {
	p := probe("px", false)
	var times []string
	p.SiteTime = true
	p.Inline = func(s Site) string {
		times = append(times, s.Time)
		return "{\n\t.reg .b64 %t9;\n\tmov.u64 %t9, " + s.Time + ";\n}"
	}
	r, err := Instrument(exitsSrc, Request{Exit: p})
	if err != nil {
		t.Fatal(err)
	}
	for _, tm := range times {
		if tm != siteTimeReg {
			t.Fatalf("site got time register %q, want %s", tm, siteTimeReg)
		}
	}
	m, err := ptx.Parse(r.PTX)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, s := range m.Funcs()["k"].Body {
		lines = append(lines, s.String())
	}
	body := strings.Join(lines, "\n")
	for _, want := range []string{
		".reg .b64 " + siteTimeReg,
		"mov.u64\t" + siteTimeReg + ", %globaltimer;\n@!%p1 bra\t$gpubpf_L1;\n{",
		"mov.u64\t" + siteTimeReg + ", %globaltimer;\n@%p2 bra\t$gpubpf_L2;\n{",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("kernel lacks\n%s\n---- got\n%s", want, body)
		}
	}
	assemble(t, r.PTX, "sm_80")
}

// TestLaunchWords: a probe that reads the launch words gives every kernel
// two hidden trailing .u64 parameters, loaded first thing; pasted sites in
// the kernel get their registers, sites in a .func get none.
func TestLaunchWords(t *testing.T) {
	p := probe("px", false)
	p.LaunchWords = true
	got := map[string][2]string{}
	p.Inline = func(s Site) string {
		got[s.Uniq] = s.Launch
		if s.Launch[0] == "" {
			return "{\n}"
		}
		return "{\n\t.reg .b64 %t9;\n\tadd.u64 %t9, " + s.Launch[0] + ", " + s.Launch[1] + ";\n}"
	}
	src := strings.Replace(exitsSrc, ".visible .entry k(.param .u32 n)", ".visible .entry k(.param .u32 n, .param .align 4 .b8 s[12])", 1)
	r, err := Instrument(src, Request{Exit: p})
	if err != nil {
		t.Fatal(err)
	}
	if want := (LaunchLayout{Params: 2, BufOffset: 16}); r.Launch["k"] != want {
		t.Errorf("layout %+v, want %+v", r.Launch["k"], want)
	}
	var inKernel, inFunc int
	for _, l := range got {
		if l == launchRegs {
			inKernel++
		} else if l == [2]string{} {
			inFunc++
		}
	}
	if inKernel != 3 || inFunc != 1 {
		t.Errorf("sites with launch registers %d (want 3, the kernel's exits), without %d (want 1, the .func's)", inKernel, inFunc)
	}
	m, err := ptx.Parse(r.PTX)
	if err != nil {
		t.Fatal(err)
	}
	k := m.Funcs()["k"]
	if n := len(k.Params); n != 4 || k.Params[2].Name != launchParams[0] || k.Params[3].Name != launchParams[1] {
		t.Fatalf("kernel params %d, want the 2 own then %v", n, launchParams)
	}
	if !strings.Contains(r.PTX, "ld.param.u64\t%gpubpf_lw0, [__gpubpf_lw0];") {
		t.Errorf("launch words are not loaded:\n%s", r.PTX)
	}
	assemble(t, r.PTX, "sm_80")

	// Without a probe that asks, the kernel keeps its signature.
	r, err = Instrument(exitsSrc, Request{Exit: probe("px", false)})
	if err != nil {
		t.Fatal(err)
	}
	if r.Launch != nil || strings.Contains(r.PTX, launchParams[0]) {
		t.Error("hidden launch parameters added for a probe that does not read them")
	}
}

// TestEntryTime: a probe that reads its thread's entry time makes every
// kernel read %globaltimer into a register first thing, before its entry
// probe; pasted sites in the kernel get the register, sites in a .func
// none, and a probe that does not ask costs the kernel nothing.
func TestEntryTime(t *testing.T) {
	p := probe("px", false)
	p.EntryTime = true
	got := map[string]string{}
	p.Inline = func(s Site) string {
		got[s.Uniq] = s.EntryTime
		if s.EntryTime == "" {
			return "{\n}"
		}
		return "{\n\t.reg .b64 %t9;\n\tmov.u64 %t9, " + s.EntryTime + ";\n}"
	}
	entry := probe("pe", false)
	entry.Inline = func(Site) string { return "{\n\t// entry probe\n}" }
	r, err := Instrument(exitsSrc, Request{Entry: entry, Exit: p})
	if err != nil {
		t.Fatal(err)
	}
	var inKernel, inFunc int
	for _, e := range got {
		if e == entryTimeReg {
			inKernel++
		} else if e == "" {
			inFunc++
		}
	}
	if inKernel != 3 || inFunc != 1 {
		t.Errorf("sites with the entry time %d (want 3, the kernel's exits), without %d (want 1, the .func's)", inKernel, inFunc)
	}
	read := strings.Index(r.PTX, "mov.u64\t"+entryTimeReg+", %globaltimer;")
	if read < 0 || !strings.Contains(r.PTX, ".reg .b64 "+entryTimeReg+";") {
		t.Fatalf("the kernel does not read its entry time:\n%s", r.PTX)
	}
	if probeAt := strings.Index(r.PTX, "// entry probe"); probeAt < read {
		t.Errorf("the entry probe runs before the entry time is read:\n%s", r.PTX)
	}
	assemble(t, r.PTX, "sm_80")

	r, err = Instrument(exitsSrc, Request{Exit: probe("px", false)})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(r.PTX, entryTimeReg) {
		t.Error("entry time read for a probe that does not ask for it")
	}
}
