package instrument

import "testing"

func TestIsStubMangledAndPlain(t *testing.T) {
	for name, want := range map[string]bool{
		"__bpftime_cuda__kernel_trace":      true,
		"_Z28__bpftime_cuda__kernel_tracev": true,
		"__gpubpf_hook_entry":               true,
		"_Z19__gpubpf_hook_entryv":          true,
		"_Z9vectorAddPKfS0_Pfi":             false,
		"__bpftime_cuda__kernel_traceX":     false,
	} {
		if got := isStub(name); got != want {
			t.Errorf("isStub(%q) = %v, want %v", name, got, want)
		}
	}
}
