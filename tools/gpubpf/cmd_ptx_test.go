package main

import (
	"os/exec"
	"strings"
	"testing"
)

// gpubpf ptx says where each program runs: a memory-access program at
// every global access (of every kernel, for bpftime's __memcapture), with
// the 16-byte record as its ctx.
func TestPTXSaysWhereProgramsRun(t *testing.T) {
	tool := gpubpfTool(t)
	for obj, want := range map[string]string{
		"../../bpf/examples/mem_trace_bpfel.o": "program mem_trace (section kprobe/__memcapture) -> .func gpubpf_mem_trace at every global load/store/atomic of every kernel; reads ctx: true (16 bytes)",
		"../../bpf/examples/counter_bpfel.o":   "-> .func gpubpf_vectorAdd_exit at every exit of _Z9vectorAddPKfS0_Pfi;",
	} {
		out, err := exec.Command(tool, "ptx", obj).CombinedOutput()
		if err != nil {
			t.Fatalf("gpubpf ptx %s: %v\n%s", obj, err, out)
		}
		if !strings.Contains(string(out), want) {
			t.Errorf("gpubpf ptx %s does not say %q:\n%s", obj, want, strings.SplitN(string(out), "\n", 4)[:3])
		}
	}
}
