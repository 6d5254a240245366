package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpubpf/gpubpf/internal/testenv"
)

// What `gpubpf ptx` prints for each bundled example is a module ptxas
// assembles, and a host-backed map's accesses in it are system-scoped.
func TestPtxOfExamplesAssembles(t *testing.T) {
	tool := gpubpfTool(t)
	ptxas := testenv.Ptxas(t)
	objs, _ := filepath.Glob("../../bpf/examples/*_bpfel.o")
	if len(objs) < 3 {
		t.Fatalf("found %d example objects: %v", len(objs), objs)
	}
	for _, obj := range objs {
		t.Run(filepath.Base(obj), func(t *testing.T) {
			out, err := exec.Command(tool, "ptx", obj).Output()
			if filepath.Base(obj) == "refused_bpfel.o" {
				// make demo's unsafe example: refused before any PTX
				if err == nil {
					t.Fatal("gpubpf ptx compiled the program the verifier must refuse")
				}
				return
			}
			if err != nil {
				t.Fatalf("gpubpf ptx: %v", err)
			}
			src := filepath.Join(t.TempDir(), "m.ptx")
			if err := os.WriteFile(src, out, 0o644); err != nil {
				t.Fatal(err)
			}
			if b, err := exec.Command(ptxas, "-arch=sm_90", src, "-o", src+".cubin").CombinedOutput(); err != nil {
				t.Fatalf("ptxas: %v\n%s", err, b)
			}
			if filepath.Base(obj) != "host_map_bpfel.o" {
				return
			}
			ptx := string(out)
			for _, want := range []string{"map per_thread (per-thread-array, host memory)", "map shared_counter (array, host memory)", "red.global.sys.add.u64"} {
				if !strings.Contains(ptx, want) {
					t.Errorf("no %q in:\n%s", want, ptx)
				}
			}
			if strings.Contains(ptx, ".gpu.") {
				t.Errorf("a GPU-scoped operation on host memory:\n%s", ptx)
			}
		})
	}
}

// gpubpf ptx --into pastes one entry program into the kernels of a real
// nvcc fatbin, as a run would: the clone assembles and holds the program's
// first-thread test; a missing --program or a program that is no probe is
// a usage error that names what to do.
func TestPtxIntoFatbin(t *testing.T) {
	tool := gpubpfTool(t)
	ptxas := testenv.Ptxas(t)
	out, err := exec.Command(tool, "ptx", "-p", "launchlate_entry", "--into", "../../pkg/runtime/fatbin/testdata/vec_add_cuda118.fatbin", "../launchlate/launchlate_bpfel.o").Output()
	if err != nil {
		t.Fatalf("gpubpf ptx --into: %v", err)
	}
	ptx := string(out)
	for _, want := range []string{"kernels _Z9vectorAddPKfS0_Pfi with launchlate_entry", ".entry _Z9vectorAddPKfS0_Pfi", "%globaltimer", "bar.warp.sync"} {
		if !strings.Contains(ptx, want) {
			t.Errorf("no %q in:\n%s", want, ptx)
		}
	}
	src := filepath.Join(t.TempDir(), "m.ptx")
	if err := os.WriteFile(src, out, 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command(ptxas, "-arch=sm_90", src, "-o", src+".cubin").CombinedOutput(); err != nil {
		t.Fatalf("ptxas: %v\n%s", err, b)
	}
	for args, want := range map[string]string{
		"--into x":                        "needs --program NAME",
		"-p ll_cudaLaunchKernel --into x": "no entry or exit program ll_cudaLaunchKernel",
	} {
		b, err := exec.Command(tool, append(append([]string{"ptx"}, strings.Fields(args)...), "../launchlate/launchlate_bpfel.o")...).CombinedOutput()
		if err == nil || !strings.Contains(string(b), want) {
			t.Errorf("gpubpf ptx %s: %v, %q; want an error saying %q", args, err, b, want)
		}
	}
}
