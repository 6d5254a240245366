package ptx

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpubpf/gpubpf/internal/testenv"
)

// fixtures returns the committed PTX files plus any in
// $GPUBPF_PTX_FIXTURES (the GPU machine adds nvcc 13's and Triton's).
func fixtures(t testing.TB) []string {
	fs, _ := filepath.Glob("testdata/*.ptx")
	if d := os.Getenv("GPUBPF_PTX_FIXTURES"); d != "" {
		more, _ := filepath.Glob(filepath.Join(d, "*.ptx"))
		fs = append(fs, more...)
	}
	if len(fs) == 0 {
		t.Fatal("no PTX fixtures")
	}
	return fs
}

func read(t testing.TB, f string) string {
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestParseVecAdd(t *testing.T) {
	m, err := Parse(read(t, "testdata/vec_add_cuda118.ptx"))
	if err != nil {
		t.Fatal(err)
	}
	if m.Version != [2]int{7, 8} || len(m.Target) != 1 || m.Target[0] != "sm_80" || m.AddressSize != 64 {
		t.Errorf("header %v %v %d", m.Version, m.Target, m.AddressSize)
	}
	vs := m.Vars()
	if v := vs["d_N"]; v == nil || v.Space != "const" || v.HasInit {
		t.Errorf("d_N: %+v", v)
	}
	if v := vs["d_counter"]; v == nil || v.Space != "global" {
		t.Errorf("d_counter: %+v", v)
	}
	es := m.Entries()
	if len(es) != 1 || es[0].Name != "_Z9vectorAddPKfS0_Pfi" || !strings.Contains(es[0].Linkage, ".visible") {
		t.Fatalf("entries %+v", es)
	}
	k := es[0]
	if len(k.Params) != 4 || k.Params[3].Type != ".u32" || k.Params[3].Size() != 4 || k.Params[0].Size() != 8 {
		t.Errorf("params %+v", k.Params)
	}
	var rets, labels, preds int
	for _, s := range k.Body {
		switch {
		case s.Kind == Instr && s.Base() == "ret":
			rets++
		case s.Kind == Label:
			labels++
		}
		if s.Pred == "@%p3" && s.Op == "bra" && s.Operands[0] == "$L__BB0_2" {
			preds++
		}
	}
	if rets != 1 || labels != 1 || preds != 1 {
		t.Errorf("rets %d labels %d predicated bra %d", rets, labels, preds)
	}
}

func TestParseClangStructParams(t *testing.T) {
	m, err := Parse(read(t, "testdata/clang14_kernels.ptx"))
	if err != nil {
		t.Fatal(err)
	}
	f := m.Funcs()["_Z9structArg1PcsPd"]
	if f == nil {
		t.Fatal("structArg missing")
	}
	want := []struct{ size, align int }{{16, 8}, {1, 1}, {2, 2}, {8, 8}}
	for i, w := range want {
		p := f.Params[i]
		if p.Size() != w.size || p.Alignment() != w.align {
			t.Errorf("param %d %q: size %d align %d, want %d %d", i, p.Text, p.Size(), p.Alignment(), w.size, w.align)
		}
	}
	if v := m.Vars()["d_N"]; v == nil || v.Space != "const" {
		t.Errorf(".visible .const d_N: %+v", v)
	}
}

func TestParseFuncDecls(t *testing.T) {
	src := `.version 7.8
.target sm_80
.address_size 64
.extern .func (.param .b32 func_retval0) vprintf
(
	.param .b64 vprintf_param_0,
	.param .b64 vprintf_param_1
)
;
.extern .func __bpftime_cuda__kernel_trace
();
.global .align 1 .b8 $str[4] = {104, 105, 10, 0};
.extern .shared .align 16 .b8 smem[];
.weak .func (.param .align 16 .b8 r[16]) f2(.param .b64 a) ;
.entry k(.param .align 8 .b8 k_param_0[24]) .maxntid 128, 1, 1
{
	.reg .b32 %r<3>;
	.reg .b64 %rd<2>;
	ld.global.v2.u32 {%r1, %r2}, [%rd1+8];
	mov.b64 {%r1, %r2}, %rd1;
	@!%p1 ret;
	prototype_0 : .callprototype (.param .b32 _) _ (.param .b64 _);
	{ // inner scope
		.reg .b32 t;
	}
	/* block
	   comment */
	exit;
}
`
	m, err := Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	fs := m.Funcs()
	if f := fs["vprintf"]; f == nil || f.Defined || len(f.Ret) != 1 || len(f.Params) != 2 || f.Linkage != ".extern" {
		t.Errorf("vprintf %+v", f)
	}
	if f := fs["__bpftime_cuda__kernel_trace"]; f == nil || len(f.Params) != 0 {
		t.Errorf("stub %+v", f)
	}
	if f := fs["f2"]; f == nil || f.Ret[0].Size() != 16 || f.Ret[0].Alignment() != 16 {
		t.Errorf("f2 %+v", f)
	}
	k := fs["k"]
	if k == nil || !k.Entry || k.Trailer != ".maxntid 128, 1, 1" || k.Params[0].Size() != 24 {
		t.Fatalf("k %+v", k)
	}
	v := m.Vars()
	if v["$str"] == nil || !v["$str"].HasInit || v["smem"] == nil || !v["smem"].Extern || v["smem"].Space != "shared" {
		t.Errorf("vars %+v", v)
	}
	var ops []string
	for _, s := range k.Body {
		ops = append(ops, s.String())
	}
	got := strings.Join(ops, "\n")
	for _, want := range []string{"ld.global.v2.u32\t{%r1, %r2}, [%rd1+8];", "@!%p1 ret;", "prototype_0:", ".callprototype (.param .b32 _) _ (.param .b64 _);", "// inner scope", "exit;"} {
		if !strings.Contains(got, want) {
			t.Errorf("body lacks %q:\n%s", want, got)
		}
	}
	// Printing and re-parsing is stable.
	again, err := Parse(m.String())
	if err != nil {
		t.Fatalf("re-parse: %v\n%s", err, m.String())
	}
	if again.String() != m.String() {
		t.Errorf("print is not stable:\n%s\n----\n%s", m.String(), again.String())
	}
}

func TestPrintStable(t *testing.T) {
	for _, f := range fixtures(t) {
		m, err := Parse(read(t, f))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out := m.String()
		m2, err := Parse(out)
		if err != nil {
			t.Fatalf("%s: re-parse: %v", f, err)
		}
		if m2.String() != out {
			t.Errorf("%s: printing is not idempotent", f)
		}
		if len(m.Entries()) == 0 {
			t.Errorf("%s: no kernels found", f)
		}
	}
}

// TestRoundTripPtxas assembles each fixture and its parse+print with ptxas
// and compares the SASS: printing an unmodified module must not change code.
func TestRoundTripPtxas(t *testing.T) {
	ptxas := testenv.Ptxas(t)
	cuobjdump := testenv.Tool(t, "cuobjdump")
	dir := t.TempDir()
	for _, f := range fixtures(t) {
		src := read(t, f)
		m, err := Parse(src)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		arch, ok := ptxasArch(t, ptxas, m)
		out := m.String()
		if !ok {
			// CI's ptxas (11.8) knows ISA <= 7.8: lower .version on both
			// sides, which is fine wherever the module uses nothing newer
			// (checked by assembling the lowered original).
			max := PtxasMaxISA(ptxas)
			low := fmt.Sprintf(".version %d.%d", max[0], max[1])
			have := fmt.Sprintf(".version %d.%d", m.Version[0], m.Version[1])
			src = strings.Replace(src, have, low, 1)
			out = strings.Replace(out, have, low, 1)
			if o, err := exec.Command(ptxas, "-arch="+arch, "-o", filepath.Join(dir, "probe.cubin"), writeTemp(t, dir, src)).CombinedOutput(); err != nil {
				t.Logf("%s: needs PTX ISA %d.%d features (%s); skipped with this ptxas", f, m.Version[0], m.Version[1], strings.TrimSpace(string(o)))
				continue
			}
		}
		a := filepath.Join(dir, "a.ptx")
		b := filepath.Join(dir, "b.ptx")
		os.WriteFile(a, []byte(src), 0o644)
		os.WriteFile(b, []byte(out), 0o644)
		sa := sass(t, ptxas, cuobjdump, arch, a)
		sb := sass(t, ptxas, cuobjdump, arch, b)
		if sa != sb {
			t.Errorf("%s: SASS differs after parse+print", f)
		}
	}
}

// ptxasArch picks the arch to assemble for (the module's target) and
// reports whether this ptxas accepts the module's ISA version.
func ptxasArch(t testing.TB, ptxas string, m *Module) (string, bool) {
	arch := "sm_80"
	for _, tg := range m.Target {
		if strings.HasPrefix(tg, "sm_") {
			arch = tg
		}
	}
	return arch, !VersionLess(PtxasMaxISA(ptxas), m.Version)
}

func writeTemp(t testing.TB, dir, src string) string {
	f := filepath.Join(dir, "probe.ptx")
	if err := os.WriteFile(f, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

func sass(t testing.TB, ptxas, cuobjdump, arch, file string) string {
	cubin := file + ".cubin"
	if out, err := exec.Command(ptxas, "-arch="+arch, "-o", cubin, file).CombinedOutput(); err != nil {
		t.Fatalf("ptxas %s: %v\n%s", file, err, out)
	}
	out, err := exec.Command(cuobjdump, "-sass", cubin).CombinedOutput()
	if err != nil {
		t.Fatalf("cuobjdump: %v\n%s", err, out)
	}
	return string(bytes.ReplaceAll(out, []byte(cubin), nil))
}

func TestSyntaxErrors(t *testing.T) {
	for src, want := range map[string]string{
		".version 7.8\n.target sm_80\n.entry k()\n{\n\tret\n}\n":        "line 5: missing ';'",
		".version 7.8\n.entry k()\n{\n\tret;\n":                         "line 2: body of k has no closing '}'",
		".version x.y\n":                                                "line 1: bad PTX version",
		".version 7.8\n}\n":                                             "line 2: unbalanced '}'",
		".version 7.8\n/* open\n":                                       "line 2: unterminated /* comment",
		".version 7.8\nfoo:\n":                                          "line 2: unexpected label foo",
		".version 7.8\n.entry k(.param .u32 a[zz])\n{\n}\n":             "line 2: parameter",
		".version 7.8\n.entry k()\n{\n\t@%p1\n;\n}\n":                   "line 4: predicate",
		".version 7.8\n.entry k()\n{\n.visible .entry j()\n{\n}\n}\n":   "inside a function body",
		".version 7.8\n.entry k()\n{\n\tld.global.u32 %r1, [%rd1];\n\t": "line 2: body of k",
	} {
		_, err := Parse(src)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v, want error containing %q", src, err, want)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, fx := range []string{"testdata/vec_add_cuda118.ptx", "testdata/clang14_kernels.ptx"} {
		if b, err := os.ReadFile(fx); err == nil {
			f.Add(string(b))
		}
	}
	f.Add(".entry k(.param .align 8 .b8 p[16])\n{\n@%p ret;\n{ .reg .b32 x; }\nL: exit;\n}\n")
	f.Fuzz(func(t *testing.T, src string) {
		m, err := Parse(src)
		if err != nil {
			if se, ok := err.(*SyntaxError); ok && (se.Line < 1 || se.Line > strings.Count(src, "\n")+1) {
				t.Fatalf("error line %d out of range: %v", se.Line, err)
			}
			return
		}
		// The lazy parser agrees once the bodies are loaded.
		lazy, err := ParseLazy(src)
		if err != nil {
			t.Fatalf("Parse accepts what ParseLazy rejects: %v", err)
		}
		for _, it := range lazy.Items {
			if f, ok := it.(*Func); ok {
				if err := f.Load(); err != nil {
					t.Fatalf("Load: %v", err)
				}
			}
		}
		// Whatever parses must print to something that parses the same way.
		out := m.String()
		if lazy.String() != out {
			t.Fatalf("lazy parse prints differently:\n%q\n%q", out, lazy.String())
		}
		m2, err := Parse(out)
		if err != nil {
			t.Fatalf("printed module does not parse: %v\n%s", err, out)
		}
		if m2.String() != out {
			t.Fatalf("print not idempotent:\n%q\n%q", out, m2.String())
		}
	})
}

func TestParseLazy(t *testing.T) {
	for _, f := range fixtures(t) {
		src := read(t, f)
		full, err := Parse(src)
		if err != nil {
			t.Fatal(err)
		}
		lazy, err := ParseLazy(src)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if len(lazy.Entries()) != len(full.Entries()) {
			t.Errorf("%s: lazy entries %d, full %d", f, len(lazy.Entries()), len(full.Entries()))
		}
		// Unloaded bodies print as they were written, and parse the same.
		again, err := Parse(lazy.String())
		if err != nil || again.String() != full.String() {
			t.Errorf("%s: lazy print differs (%v)", f, err)
		}
		for _, fn := range lazy.Funcs() {
			if err := fn.Load(); err != nil {
				t.Fatalf("%s: Load %s: %v", f, fn.Name, err)
			}
		}
		if lazy.String() != full.String() {
			t.Errorf("%s: loaded module prints differently", f)
		}
	}
	// A body error surfaces from Load with the right line.
	m, err := ParseLazy(".version 7.8\n.target sm_80\n.entry k()\n{\n\tmov.u32 %r1, 1;\n\t@%p1\n;\n}\n")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Funcs()["k"].Load(); err == nil || !strings.Contains(err.Error(), "line 6: predicate") {
		t.Errorf("Load error %v", err)
	}
}
