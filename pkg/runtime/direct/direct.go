// Package direct turns GPU programs compiled by pkg/runtime/jit into kernels
// of their own, for direct runs (gpubpf run --direct): no application
// kernel to inject them into, so each program gets a small entry,
// gpubpf_direct_<program>, that runs its body once per thread with a ctx of
// zeros, and the module gets the header the device's driver JIT needs.
package direct

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/gpubpf/gpubpf/pkg/runtime/jit"
	"github.com/gpubpf/gpubpf/pkg/runtime/ptx"
)

// Program is one compiled program to make a kernel of.
type Program struct {
	// Name is the eBPF program's name; its kernel is EntryName(Name).
	Name string
	Func *jit.Function
}

// Target is the device the module is for.
type Target struct {
	// Major and Minor are the device's compute capability (Hello's
	// device list); 0.0 when unknown: the module then targets MinSM, which
	// the driver compiles for any newer GPU.
	Major, Minor int
	// MaxPTX is the highest PTX ISA the driver JITs ({0,0}: no limit).
	MaxPTX [2]int
}

// Module is a PTX module with one kernel per program.
type Module struct {
	PTX string
	// Entries are the kernels' names, in the order of the programs.
	Entries []string
	// SM is the .target, Version the .version.
	SM      string
	Version [2]int
}

// MinSM is the oldest architecture the compiled programs run on: they use
// ld.acquire/st.release (sm_70, Volta).
const MinSM = 70

// minISA is the lowest PTX ISA each target may be written in (PTX ISA
// manual, "Target ISA notes"). A GPU newer than the last one here gets
// the newest target here: PTX for an architecture JITs for every later one.
var minISA = []struct {
	sm  int
	isa [2]int
}{
	{70, [2]int{6, 0}}, {72, [2]int{6, 1}}, {75, [2]int{6, 3}}, {80, [2]int{7, 0}}, {86, [2]int{7, 1}},
	{87, [2]int{7, 4}}, {89, [2]int{7, 8}}, {90, [2]int{7, 8}}, {100, [2]int{8, 6}}, {103, [2]int{8, 8}},
	{110, [2]int{9, 0}}, {120, [2]int{8, 7}}, {121, [2]int{8, 8}},
}

var nonIdent = regexp.MustCompile(`[^A-Za-z0-9_]`)

// EntryName is the kernel a direct program runs as.
func EntryName(prog string) string { return "gpubpf_direct_" + nonIdent.ReplaceAllString(prog, "_") }

// target picks the .target and the ISA it needs for a device of sm.
func target(sm int) (int, [2]int, error) {
	if sm == 0 {
		sm = MinSM
	}
	if sm < MinSM {
		return 0, [2]int{}, fmt.Errorf("the GPU is sm_%d; gpubpf's GPU programs need sm_%d (Volta) or newer", sm, MinSM)
	}
	best := minISA[0]
	for _, t := range minISA {
		if t.sm == sm {
			return t.sm, t.isa, nil
		}
		if t.sm < sm && t.sm >= best.sm {
			best = t
		}
	}
	return best.sm, best.isa, nil
}

// Build makes one module of every program: each program's PTX, then its
// entry. Two programs of one name, or none, are the caller's mistake.
func Build(progs []Program, t Target) (*Module, error) {
	if len(progs) == 0 {
		return nil, fmt.Errorf("no direct programs to build a module of")
	}
	sm, isa, err := target(t.Major*10 + t.Minor)
	if err != nil {
		return nil, err
	}
	v := isa
	for _, p := range progs {
		if ptx.VersionLess(v, p.Func.PTXVersion) {
			v = p.Func.PTXVersion
		}
	}
	if t.MaxPTX != [2]int{} && ptx.VersionLess(t.MaxPTX, v) {
		return nil, fmt.Errorf("the direct programs need PTX ISA %d.%d for sm_%d, but the driver accepts at most %d.%d: update the NVIDIA driver",
			v[0], v[1], sm, t.MaxPTX[0], t.MaxPTX[1])
	}
	m := &Module{SM: fmt.Sprintf("sm_%d", sm), Version: v}
	var b strings.Builder
	fmt.Fprintf(&b, ".version %d.%d\n.target %s\n.address_size 64\n\n", v[0], v[1], m.SM)
	seen := map[string]bool{}
	for _, p := range progs {
		e := EntryName(p.Name)
		if seen[e] {
			return nil, fmt.Errorf("two direct programs make kernel %s: rename one of them", e)
		}
		seen[e] = true
		m.Entries = append(m.Entries, e)
		b.WriteString(p.Func.PTX)
		b.WriteString("\n")
		b.WriteString(entry(e, p.Func))
		b.WriteString("\n")
	}
	m.PTX = b.String()
	return m, nil
}

// ctxVar is the entry's ctx buffer.
const ctxVar = "gpubpf_direct_ctx"

// entry is the kernel for f: no parameters (a direct program has no
// application kernel whose parameters its ctx could copy), a ctx of zeros
// as long as the program reads (each thread's own: a program may write
// through ctx), and the program's body pasted in, not called, as probes
// are: ptxas does not inline calls.
func entry(name string, f *jit.Function) string {
	var b strings.Builder
	fmt.Fprintf(&b, ".visible .entry %s()\n{\n\t.reg .b64 %%gpubpf_c;\n", name)
	if n := (f.CtxBytes + 7) / 8 * 8; f.UsesCtx && n > 0 {
		fmt.Fprintf(&b, "\t.local .align 16 .b8 %s[%d];\n", ctxVar, n)
		b.WriteString(zero(n))
		fmt.Fprintf(&b, "\tmov.u64 %%gpubpf_c, %s;\n\tcvta.local.u64 %%gpubpf_c, %%gpubpf_c;\n", ctxVar)
	} else {
		b.WriteString("\tmov.u64 %gpubpf_c, 0;\n")
	}
	b.WriteString(f.InlineAt(jit.Site{Ctx: "%gpubpf_c", Uniq: "gpubpf_d", Kernel: jit.UnknownKernel}))
	b.WriteString("\tret;\n}\n")
	return b.String()
}

// zero fills the n-byte ctx buffer (n a multiple of 8): stores written out
// for a few words, a loop for more (up to jit.CtxMax bytes).
func zero(n int) string {
	var b strings.Builder
	if n <= 16*8 {
		for o := 0; o < n; o += 8 {
			fmt.Fprintf(&b, "\tst.local.b64 [%s+%d], 0;\n", ctxVar, o)
		}
		return b.String()
	}
	fmt.Fprintf(&b, "\t{\n\t.reg .b64 %%gpubpf_z<2>;\n\t.reg .pred %%gpubpf_zp;\n"+
		"\tmov.u64 %%gpubpf_z0, %s;\n\tadd.u64 %%gpubpf_z1, %%gpubpf_z0, %d;\n"+
		"$gpubpf_zero:\n\tst.local.b64 [%%gpubpf_z0], 0;\n\tadd.u64 %%gpubpf_z0, %%gpubpf_z0, 8;\n"+
		"\tsetp.lt.u64 %%gpubpf_zp, %%gpubpf_z0, %%gpubpf_z1;\n\t@%%gpubpf_zp bra $gpubpf_zero;\n\t}\n", ctxVar, n)
	return b.String()
}
