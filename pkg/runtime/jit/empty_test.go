package jit

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cilium/ebpf/asm"

	"github.com/gpubpf/gpubpf/internal/testenv"
)

// sassSizes assembles module and returns the .text size of each entry.
func sassSizes(t *testing.T, module string, entries ...string) map[string]uint64 {
	t.Helper()
	ptxas := testenv.Ptxas(t)
	dir := t.TempDir()
	src, bin := filepath.Join(dir, "m.ptx"), filepath.Join(dir, "m.cubin")
	os.WriteFile(src, []byte(module), 0o644)
	if out, err := exec.Command(ptxas, "-arch=sm_90", "-O3", src, "-o", bin).CombinedOutput(); err != nil {
		t.Fatalf("ptxas: %v\n%s\n%s", err, out, numbered(module))
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	secs, err := elfSections(data)
	if err != nil {
		t.Fatal(err)
	}
	sizes := map[string]uint64{}
	for _, e := range entries {
		sz, ok := secs[".text."+e]
		if !ok {
			t.Fatalf("cubin has no .text.%s", e)
		}
		sizes[e] = sz
	}
	return sizes
}

// vecAddLike is a kernel shaped like vec_add whose entry optionally calls
// the probe first (what the injector does).
func vecAddLike(name, probe string) string {
	call := ""
	if strings.HasPrefix(probe, "\t{") {
		call = probe // an inlined body
	} else if probe != "" {
		call = fmt.Sprintf("\t{\n\t.param .b64 rv;\n\t.param .b64 pc;\n\tst.param.b64 [pc], 0;\n\tcall.uni (rv), %s, (pc);\n\t}\n", probe)
	}
	return fmt.Sprintf(`.visible .entry %s(.param .u64 a, .param .u64 b, .param .u64 c, .param .u32 n)
{
	.reg .b64 %%x<8>;
	.reg .b32 %%i<4>;
	.reg .f32 %%f<4>;
	.reg .pred %%q;
%s	mov.u32 %%i0, %%ctaid.x;
	mov.u32 %%i1, %%ntid.x;
	mov.u32 %%i2, %%tid.x;
	mad.lo.u32 %%i3, %%i0, %%i1, %%i2;
	ld.param.u32 %%i0, [n];
	setp.ge.u32 %%q, %%i3, %%i0;
	@%%q bra $done;
	ld.param.u64 %%x0, [a];
	ld.param.u64 %%x1, [b];
	ld.param.u64 %%x2, [c];
	mul.wide.u32 %%x3, %%i3, 4;
	add.u64 %%x4, %%x0, %%x3;
	add.u64 %%x5, %%x1, %%x3;
	add.u64 %%x6, %%x2, %%x3;
	ld.global.f32 %%f0, [%%x4];
	ld.global.f32 %%f1, [%%x5];
	add.f32 %%f2, %%f0, %%f1;
	st.global.f32 [%%x6], %%f2;
$done:
	ret;
}
`, name, call)
}

// TestEmptyProbeAddsNothing: an empty probe (return 0) pasted into a kernel
// with InlineBody leaves its SASS exactly as it was. (Called as a .func it
// costs a CALL: ptxas does not inline calls; the test logs that too.)
func TestEmptyProbeAddsNothing(t *testing.T) {
	f, err := Compile(prog(asm.Mov.Imm(asm.R0, 0), asm.Return()), Options{FuncName: "empty_probe"})
	if err != nil {
		t.Fatal(err)
	}
	mod := ".version 7.8\n.target sm_90\n.address_size 64\n\n" + f.PTX + vecAddLike("plain", "") +
		vecAddLike("called", "empty_probe") + vecAddLike("inlined", f.InlineBody("0", "", "p0"))
	s := sassSizes(t, mod, "plain", "called", "inlined")
	t.Logf("empty probe: sass .text plain=%d inlined=%d called=%d bytes", s["plain"], s["inlined"], s["called"])
	if s["plain"] != s["inlined"] {
		t.Fatalf("inlined empty probe changed the kernel's code size: %d -> %d bytes", s["plain"], s["inlined"])
	}
}

// TestInlineBodyAssembles pastes every test program inline, twice into one
// kernel, and assembles it.
func TestInlineBodyAssembles(t *testing.T) {
	for name, insns := range allCases() {
		f, err := Compile(prog(insns...), testOpts())
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		body := f.InlineBody("%x7", "%x6", "pa") + f.InlineBody("0", "", "pb")
		mod := ".version 7.8\n.target sm_90\n.address_size 64\n\n" + f.PTX + vecAddLike("k", body)
		sassSizes(t, mod, "k")
	}
}

// elfSections reads section sizes by name from an ELF64 file. debug/elf
// refuses cubins (their e_version is not EV_CURRENT), so parse the headers.
func elfSections(b []byte) (map[string]uint64, error) {
	le := binary.LittleEndian
	if len(b) < 64 || string(b[:4]) != "\x7fELF" {
		return nil, errors.New("not an ELF file")
	}
	shoff, shentsize, shnum, shstrndx := le.Uint64(b[0x28:]), uint64(le.Uint16(b[0x3a:])), uint64(le.Uint16(b[0x3c:])), uint64(le.Uint16(b[0x3e:]))
	if shoff+shnum*shentsize > uint64(len(b)) || shstrndx >= shnum {
		return nil, errors.New("truncated ELF section headers")
	}
	sh := func(i uint64) []byte { return b[shoff+i*shentsize:] }
	strOff := le.Uint64(sh(shstrndx)[0x18:])
	out := map[string]uint64{}
	for i := uint64(0); i < shnum; i++ {
		h := sh(i)
		n := strOff + uint64(le.Uint32(h))
		end := n
		for end < uint64(len(b)) && b[end] != 0 {
			end++
		}
		out[string(b[n:end])] = le.Uint64(h[0x20:])
	}
	return out, nil
}
