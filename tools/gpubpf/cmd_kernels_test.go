package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/gpubpf/gpubpf/pkg/toolkit"
)

const fixtures = "../../pkg/runtime/fatbin/testdata/"

func runKernels(t *testing.T, args ...string) (stdout, stderr string, rc int) {
	t.Helper()
	app := newApp()
	var out, errb bytes.Buffer
	app.Writer, app.ErrWriter = &out, &errb
	rc = toolkit.RunArgs(app, append([]string{"gpubpf", "kernels"}, args...), &errb)
	return out.String(), errb.String(), rc
}

func TestKernelsTable(t *testing.T) {
	out, errs, rc := runKernels(t, fixtures+"multi_sm90_cuda13", fixtures+"vec_add_sm90sass_cuda13")
	if rc != 0 {
		t.Fatalf("rc %d: %s", rc, errs)
	}
	for _, want := range []string{"KERNEL", "ns::reduce(float const*, float*, int)", "yes compute_90", "5 kernels: 5 traceable (PTX), 0 SASS only", "1 kernels: 0 traceable (PTX), 1 SASS only"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(errs, "kernel vectorAdd has only sm_90 SASS, no PTX: rebuild with -gencode arch=compute_90,code=compute_90 to trace it") {
		t.Errorf("no rebuild advice on stderr: %q", errs)
	}
	for _, l := range strings.Split(out, "\n") {
		if n := len([]rune(l)); n > 100 {
			t.Errorf("line of %d columns: %s", n, l)
		}
	}
}

func TestKernelsJSON(t *testing.T) {
	out, errs, rc := runKernels(t, "--json", "-k", "axpy", fixtures+"libmulti_cuda118.so")
	if rc != 0 {
		t.Fatalf("rc %d: %s", rc, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("want 2 lines, got %q", out)
	}
	var rec kernelJSON
	if err := json.Unmarshal([]byte(lines[0]), &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Kernel != "axpy" || !rec.PTX || rec.PTXArchs[0] != "compute_75" || rec.SASSArchs[0] != "sm_75" || !strings.Contains(rec.Signature, "axpy<double>") {
		t.Errorf("record %+v", rec)
	}
}

func TestKernelsErrors(t *testing.T) {
	if _, errs, rc := runKernels(t, "-k", "scal", fixtures+"libmulti_cuda118.so"); rc != 1 || !strings.Contains(errs, "closest: scale (_Z5scalePfi)") {
		t.Errorf("typo: rc %d, %q", rc, errs)
	}
	if _, errs, rc := runKernels(t, fixtures+"vec_add.cu"); rc != 1 || !strings.Contains(errs, "not a readable ELF file") {
		t.Errorf("source file: rc %d, %q", rc, errs)
	}
	if _, _, rc := runKernels(t); rc != 2 {
		t.Errorf("no file: rc %d, want 2 (usage)", rc)
	}
}
