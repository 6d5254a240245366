package instrument

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gpubpf/gpubpf/pkg/runtime/ptx"
)

// reaching is a probe that reads ctx and may access bytes of it.
func reaching(name string, bytes int) *Probe {
	p := probe(name, true)
	p.CtxBytes = bytes
	return p
}

// body renders function name of the instrumented module compactly.
func body(t *testing.T, src, name string) string {
	t.Helper()
	m, err := ptx.Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	f := m.Funcs()[name]
	if f == nil {
		t.Fatalf("no function %s in:\n%s", name, src)
	}
	var lines []string
	for _, s := range f.Body {
		lines = append(lines, s.String())
	}
	return strings.Join(lines, "\n")
}

// TestCtxBufferReach: the kernel's ctx buffer covers what the probes may
// read, zero past the parameters (zeros first: the copy then fills the
// word the last parameter shares), and is the parameters alone when no
// probe reads further.
func TestCtxBufferReach(t *testing.T) {
	src := read(t, "../ptx/testdata/vec_add_cuda118.ptx") // 3 pointers and an int: 28 bytes
	const k = "_Z9vectorAddPKfS0_Pfi"
	for _, c := range []struct {
		name        string
		entry, exit *Probe
		size        int
		zero        []int // offsets of the 8-byte zero stores
		loop        bool
	}{
		{"params-only", reaching("pe", 28), nil, 32, nil, false},
		{"hand-written", reaching("pe", 0), nil, 32, nil, false},
		{"entry-reads-on", reaching("pe", 44), nil, 48, []int{24, 32, 40}, false},
		{"exit-reads-further", reaching("pe", 8), reaching("px", 64), 64, []int{24, 32, 40, 48, 56}, false},
		{"exit-only", nil, reaching("px", 36), 40, []int{24, 32}, false},
		{"escaped", reaching("pe", 4096), nil, 4120, nil, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, err := Instrument(src, Request{Entry: c.entry, Exit: c.exit, Globals: map[string]uint64{"d_N": 0x1000, "d_counter": 0x2000}})
			if err != nil {
				t.Fatal(err)
			}
			b := body(t, r.PTX, k)
			if want := ".local .align 16 .b8 __gpubpf_ctx[" + strconv.Itoa(c.size) + "];"; !strings.Contains(b, want) {
				t.Errorf("lacks %q:\n%s", want, b)
			}
			stores := regexp.MustCompile(`st\.local\.b64\t\[__gpubpf_ctx\+(\d+)\], 0;`).FindAllStringSubmatch(b, -1)
			var got []int
			for _, m := range stores {
				n, _ := strconv.Atoi(m[1])
				got = append(got, n)
			}
			if !slices.Equal(got, c.zero) {
				t.Errorf("zero stores at %v, want %v:\n%s", got, c.zero, b)
			}
			if len(c.zero) > 0 {
				z := strings.Index(b, "st.local.b64\t[__gpubpf_ctx+24], 0;")
				n := strings.Index(b, "st.local.b32\t[__gpubpf_ctx+24], ")
				if z < 0 || n < 0 || z > n {
					t.Errorf("the zero of the last parameter's word does not come before its copy:\n%s", b)
				}
			}
			if loop := strings.Contains(b, "st.local.b64\t[%gpubpf_z0+24], 0;"); loop != c.loop {
				t.Errorf("zero loop %v, want %v:\n%s", loop, c.loop, b)
			}
			assemble(t, r.PTX, "sm_80")
		})
	}
}

// TestFuncExitGetsZeroCtx: an exit inside a .func (no kernel parameters
// there) hands the probe a zero-filled buffer of its own, not NULL.
func TestFuncExitGetsZeroCtx(t *testing.T) {
	for _, c := range []struct {
		reach, size int
		loop        bool
	}{{20, 24, false}, {0, 8, false}, {4096, 4096, true}} {
		r, err := Instrument(exitsSrc, Request{Exit: reaching("px", c.reach)})
		if err != nil {
			t.Fatal(err)
		}
		h := body(t, r.PTX, "helper")
		for _, want := range []string{
			".local .align 16 .b8 __gpubpf_ctx[" + strconv.Itoa(c.size) + "];",
			"mov.u64\t%gpubpf_ctx, __gpubpf_ctx;\ncvta.local.u64\t%gpubpf_ctx, %gpubpf_ctx;\n{\n.param .b64 gpubpf_arg;\n.param .b64 gpubpf_ret;\nst.param.b64\t[gpubpf_arg], %gpubpf_ctx;",
		} {
			if !strings.Contains(h, want) {
				t.Errorf("reach %d: helper lacks %q:\n%s", c.reach, want, h)
			}
		}
		if strings.Contains(h, "[gpubpf_arg], 0;") {
			t.Errorf("reach %d: helper still passes ctx = 0:\n%s", c.reach, h)
		}
		// The fill goes with the call, behind the exit's predicate.
		if !c.loop {
			for o := 0; o < c.size; o += 8 {
				if !strings.Contains(h, "st.local.b64\t[__gpubpf_ctx+"+strconv.Itoa(o)+"], 0;") {
					t.Errorf("reach %d: no zero store at %d:\n%s", c.reach, o, h)
				}
			}
			if g, z := strings.Index(h, "@!%p1 bra"), strings.Index(h, "st.local.b64\t[__gpubpf_ctx+0], 0;"); g < 0 || z < g {
				t.Errorf("reach %d: the fill is not behind the exit's predicate:\n%s", c.reach, h)
			}
		} else if !strings.Contains(h, "st.local.b64\t[%gpubpf_z0+24], 0;") {
			t.Errorf("reach %d: no zero loop:\n%s", c.reach, h)
		}
		// The kernel's own exits still get the parameter copy.
		if k := body(t, r.PTX, "k"); !strings.Contains(k, "st.param.b64\t[gpubpf_arg], %gpubpf_ctx;") || strings.Contains(k, "[gpubpf_arg], 0;") {
			t.Errorf("reach %d: kernel exits do not pass the parameter copy:\n%s", c.reach, k)
		}
		note := false
		for _, n := range r.Notes {
			note = note || strings.Contains(n, "exit in .func helper: the exit probe reads zeros for ctx there")
		}
		if !note {
			t.Errorf("notes %q", r.Notes)
		}
		assemble(t, r.PTX, "sm_80")
	}
}

// A stub called from a .func likewise gets a zero-filled ctx.
func TestStubInFuncGetsZeroCtx(t *testing.T) {
	src := `.version 7.8
.target sm_80
.address_size 64
.extern .func __bpftime_cuda__kernel_trace
(
)
;
.func hook()
{
	call.uni __bpftime_cuda__kernel_trace, ();
	ret;
}
.visible .entry k(.param .u64 p)
{
	call.uni hook, ();
	ret;
}
`
	r, err := Instrument(src, Request{Entry: reaching("pe", 16)})
	if err != nil {
		t.Fatal(err)
	}
	h := body(t, r.PTX, "hook")
	for _, want := range []string{".local .align 16 .b8 __gpubpf_ctx[16];", "st.local.b64\t[__gpubpf_ctx+8], 0;", "st.param.b64\t[gpubpf_arg], %gpubpf_ctx;"} {
		if !strings.Contains(h, want) {
			t.Errorf("hook lacks %q:\n%s", want, h)
		}
	}
	assemble(t, r.PTX, "sm_80")
}

// TestMemRecordReach: the memory probe's record buffer grows to what the
// probe may read, zero past the 16-byte record.
func TestMemRecordReach(t *testing.T) {
	src := `.version 7.8
.target sm_80
.address_size 64
.visible .entry k(.param .u64 p)
{
	.reg .b64 %rd<3>;
	ld.param.u64 %rd1, [p];
	ld.global.u64 %rd2, [%rd1];
	ret;
}
`
	for _, c := range []struct {
		reach, size int
		zero        []int
	}{{0, 16, nil}, {12, 16, nil}, {40, 40, []int{16, 24, 32}}, {4096, 4112, nil}} {
		r, err := Instrument(src, Request{MemAccess: reaching("pm", c.reach)})
		if err != nil {
			t.Fatal(err)
		}
		b := body(t, r.PTX, "k")
		if want := ".local .align 8 .b8 __gpubpf_mem[" + strconv.Itoa(c.size) + "];"; !strings.Contains(b, want) {
			t.Errorf("reach %d: lacks %q:\n%s", c.reach, want, b)
		}
		for _, o := range c.zero {
			if !strings.Contains(b, "st.local.b64\t[__gpubpf_mem+"+strconv.Itoa(o)+"], 0;") {
				t.Errorf("reach %d: no zero store at %d:\n%s", c.reach, o, b)
			}
		}
		if strings.Contains(b, "[__gpubpf_mem+8], 0;") || strings.Contains(b, "[__gpubpf_mem+0], 0;") {
			t.Errorf("reach %d: the record itself is zeroed:\n%s", c.reach, b)
		}
		assemble(t, r.PTX, "sm_80")
	}
}
