package symbolize

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpubpf/gpubpf/internal/testenv"
	"github.com/gpubpf/gpubpf/pkg/procmaps"
)

func TestDemangle(t *testing.T) {
	if got := Demangle("_Z6vecAddPKfS0_Pfi"); got != "vecAdd(float const*, float const*, float*, int)" {
		t.Errorf("Demangle = %q", got)
	}
	if got := DemangledBase("_ZN2ns4gemmIfEEvPT_"); got != "ns::gemm<float>" {
		t.Errorf("DemangledBase = %q", got)
	}
	if got := Demangle("main"); got != "main" {
		t.Errorf("plain name changed: %q", got)
	}
}

// A PIE program's function addresses, read from the live process, must come
// back as its symbols, which checks the load-bias arithmetic end to end.
func TestResolveLivePIE(t *testing.T) {
	gcc := testenv.Tool(t, "gcc")
	dir := t.TempDir()
	src := filepath.Join(dir, "p.c")
	os.WriteFile(src, []byte(`#include <stdio.h>
#include <unistd.h>
__attribute__((noinline)) void stub(void) __asm__("_Z4stubv");
__attribute__((noinline)) void stub(void) { }
__attribute__((noinline)) int helper(int x) { return x * 3 + 1; }
int main(void) { printf("%p %p\n", (void *)stub, (void *)helper); fflush(stdout); stub(); pause(); return helper(1); }
`), 0o644)
	bin := filepath.Join(dir, "p")
	if out, err := exec.Command(gcc, "-O1", "-pie", "-fPIE", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	cmd := exec.Command(bin)
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	var a, b uintptr
	buf := make([]byte, 128)
	n, _ := stdout.Read(buf)
	if _, err := fmtSscan(string(buf[:n]), &a, &b); err != nil {
		t.Fatalf("reading addresses %q: %v", buf[:n], err)
	}
	ms, err := procmaps.Read(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	s := New()
	fr := s.Resolve(cmd.Process.Pid, ms, uint64(a))
	if fr.Name != "_Z4stubv" || fr.Offset != 0 || fr.Demangled() != "stub()" || !strings.HasSuffix(fr.Module, "/p") {
		t.Errorf("stub resolved as %+v", fr)
	}
	fr = s.Resolve(cmd.Process.Pid, ms, uint64(b)+3)
	if fr.Name != "helper" || fr.Offset != 3 || fr.String() != "helper+0x3" {
		t.Errorf("helper+3 resolved as %+v (%s)", fr, fr)
	}
	// Through the load bias alone (no maps), as after the process exits.
	o, err := Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	hv, _ := o.Symbol("helper")
	fr2, ok := o.ResolveWithBias(bin, uint64(b)-hv, uint64(a))
	if !ok || fr2.Name != "_Z4stubv" {
		t.Errorf("ResolveWithBias = %+v %v", fr2, ok)
	}
	// Through the kernel's start_code (/proc/PID/stat field 26), as
	// gpuevent_snoop gets it from BPF when no probe is in the executable.
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	var startCode uint64
	fmt.Sscan(fields[23], &startCode)
	bias, ok := o.BiasFromCodeStart(startCode)
	if fr3, ok2 := o.ResolveWithBias(bin, bias, uint64(a)); !ok || !ok2 || fr3.Name != "_Z4stubv" {
		t.Errorf("with the bias from start_code %#x (%#x, %v): %+v", startCode, bias, ok, fr3)
	}
	if fr := s.Resolve(cmd.Process.Pid, ms, 8); fr.Module != "" || fr.String() != "0x8" {
		t.Errorf("unmapped address resolved as %+v", fr)
	}
}

func fmtSscan(s string, a, b *uintptr) (int, error) {
	return fmt.Sscanf(strings.TrimSpace(s), "%v %v", a, b)
}

func TestStubKernel(t *testing.T) {
	for sym, want := range map[string]string{
		"_ZZ35__device_stub__Z9vectorAddPKfS0_PfiPKfS0_PfiE8__handle": "_Z9vectorAddPKfS0_Pfi",
		"_ZZ21__device_stub__vecaddPfE8__handle":                      "vecadd",
		"_ZZN2ns28__device_stub__ZN2ns4gemmEPfEPfE8__handle":          "_ZN2ns4gemmEPf",
		"_ZZ35__device_stub__Z9vectorAddPKfS0_PfiPKfS0_PfiE5__tmp":    "_Z9vectorAddPKfS0_Pfi", // not filtered here: stubHandle checks the suffix
		"garbage": "",
	} {
		if got := stubKernel(sym); got != want {
			t.Errorf("stubKernel(%s) = %q, want %q", sym, got, want)
		}
	}
}
