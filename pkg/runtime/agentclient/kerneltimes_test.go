package agentclient

import (
	"strings"
	"testing"
)

// Kernel times need CUPTI in the process; where it cannot be had, the
// start says why in words a user can act on, and reads are refused until
// a start succeeds. (CUPTI itself runs on the GPU machine:
// scripts/gpu/cupti-check.sh.)
func TestKernelTimesRefused(t *testing.T) {
	f := build(t)
	tests := []struct {
		name string
		env  []string
		want string
	}{
		{"switched off", []string{"GPUBPF_CUPTI=off"}, "CUPTI is off in this process (GPUBPF_CUPTI=off)"},
		{"named library missing", []string{"GPUBPF_CUPTI=/nonexistent/libcupti.so.13"}, "GPUBPF_CUPTI=/nonexistent/libcupti.so.13: "},
		{"not a CUPTI", []string{"GPUBPF_CUPTI=" + f.agent}, "lacks the CUPTI calls"},
		{"a tool injected", []string{"CUDA_INJECTION64_PATH=/opt/nsight/libToolsInjection64.so"}, "CUPTI belongs to a tool injected into this process (CUDA_INJECTION64_PATH=/opt/nsight/libToolsInjection64.so)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, c := f.startDialed(t, tc.env...)
			defer c.Close()
			if got := a.launch("launch"); got != "_Z6vecAddPfi" {
				t.Fatalf("launch ran %q", got)
			}
			if _, err := c.KernelTimes(false); err == nil || !strings.Contains(err.Error(), "not started") {
				t.Errorf("read before a start: %v, want refused as not started", err)
			}
			lib, _, err := c.KernelTimesStart()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("start: lib %q, error %v; want an error saying %q", lib, err, tc.want)
			}
			// the program runs on
			if got := a.launch("launch"); got != "_Z6vecAddPfi" {
				t.Fatalf("launch after the refusal ran %q", got)
			}
		})
	}
}
