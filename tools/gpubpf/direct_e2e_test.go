package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDirectRunEndToEnd runs `gpubpf run --direct` the way a user does, on
// this GPU-less machine, with a stand-in libcuda: the real agent executed as
// the host process, the maps placed and filled through it, the programs
// compiled, wrapped as kernels, loaded and launched, the maps read back and
// dumped. (The stand-in executes no PTX: results stay as filled; the GPU
// check, scripts/gpu/direct-check.sh, proves them.)
func TestDirectRunEndToEnd(t *testing.T) {
	tool := gpubpfTool(t) // next to libgpubpf-agent.so, as make installs them
	_, fakeEnv := fakeCUDA(t)
	sockDir := envValue(fakeEnv, "GPUBPF_AGENT_SOCKET_DIR")
	dir := t.TempDir()
	obj, _ := filepath.Abs("../../bpf/examples/direct_run_bpfel.o")

	gpubpf := func(env []string, args ...string) (stdout, stderr string, code int, took time.Duration) {
		t.Helper()
		cmd := exec.Command(tool, args...)
		cmd.Env = append(append([]string(nil), fakeEnv...), env...)
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		start := time.Now()
		err := cmd.Run()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return o.String(), e.String(), code, time.Since(start)
	}
	hostsLeft := func() {
		t.Helper()
		ents, _ := os.ReadDir(sockDir)
		for _, e := range ents {
			pid := strings.TrimSuffix(e.Name(), ".sock")
			if _, err := os.Stat("/proc/" + pid); err == nil {
				t.Errorf("host process %s is left behind", pid)
			} else {
				t.Errorf("host process %s left its socket behind", pid)
			}
		}
	}

	// The vector add over 1M elements, filled by start/step.
	dump := filepath.Join(dir, "vec.json")
	out, errOut, code, _ := gpubpf(nil, "run", "-j", "--direct", "--program", "vec_add", "--threads", "1048576",
		"--map", `vec_A={"start":0,"step":1}`, "--map", `vec_B={"start":0,"step":2}`, "--map", "vec_N=[1048576]", "--dump", dump, obj)
	if code != 0 {
		t.Fatalf("vec_add: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if !strings.Contains(out, "DIRECT gpubpf_direct_vec_add grid 4096,1,1 block 256,1,1 params 0") {
		t.Errorf("the driver did not see the launch of 4096 blocks of 256:\n%s", out)
	}
	var direct, summary map[string]any
	for _, line := range strings.Split(out, "\n") {
		var o map[string]any
		if json.Unmarshal([]byte(line), &o) != nil {
			continue
		}
		switch o["type"] {
		case "direct":
			direct = o
		case "summary":
			summary = o
		}
	}
	if direct == nil || direct["program"] != "vec_add" || direct["threads"] != float64(1<<20) || direct["kernel_ns"] != float64(12500) || direct["timed"] != true {
		t.Errorf("direct line %v", direct)
	}
	if summary == nil || summary["launched"] != float64(1) || summary["device_name"] != "Fake GPU" {
		t.Errorf("summary %v", summary)
	}
	raw, err := os.ReadFile(dump)
	if err != nil {
		t.Fatal(err)
	}
	var maps map[string][]any
	if err := json.Unmarshal(raw, &maps); err != nil {
		t.Fatalf("the dump is not JSON of arrays: %v", err)
	}
	a, b, c, n := maps["vec_A"], maps["vec_B"], maps["vec_C"], maps["vec_N"]
	if len(a) != 1<<20 || len(b) != 1<<20 || len(c) != 1<<20 || len(n) != 1 || n[0] != float64(1<<20) {
		t.Fatalf("dump sizes A %d B %d C %d N %v", len(a), len(b), len(c), n)
	}
	for k := 0; k < 1<<20; k++ {
		if a[k] != float64(k) || b[k] != float64(2*k) || c[k] != float64(0) {
			t.Fatalf("key %d: A %v B %v C %v", k, a[k], b[k], c[k])
		}
	}
	hostsLeft()

	// A dump reads back as a map file: the same maps, the same dump.
	again := filepath.Join(dir, "again.json")
	if out, errOut, code, _ := gpubpf(nil, "run", "--direct", "--program", "vec_add", "--map-file", dump, "--dump", again, obj); code != 0 {
		t.Fatalf("--map-file of a dump: exit %d\n%s\n%s", code, out, errOut)
	}
	if raw2, _ := os.ReadFile(again); !bytes.Equal(raw, raw2) {
		t.Error("a dump fed back with --map-file dumps differently")
	}

	// Every program, in the object's order, with text output that does not
	// flood: a 1M array prints a few entries and a count.
	out, errOut, code, _ = gpubpf(nil, "run", "--direct", "--grid", "4,4", "--block", "16,16", "--map", `vec_A={"start":1,"step":1}`,
		"--map", "gemm_dims=[[64,64,64]]", obj)
	if code != 0 {
		t.Fatalf("all programs: exit %d\n%s\n%s", code, out, errOut)
	}
	order := []string{"DIRECT gpubpf_direct_vec_add grid 4,4,1 block 16,16,1", "DIRECT gpubpf_direct_gemm", "DIRECT gpubpf_direct_hello",
		"vec_add: grid (4,4,1) block (16,16,1), 4096 threads, kernel time 12.5 us", "gemm: grid", "hello: grid",
		"gemm_dims (GPU array, GPU 0):\n  0: [64 64 64]", "vec_A (GPU array, GPU 0):\n  0: 1\n  1: 2\n", "  ...\n",
		"  1048575: 1048576\n  (1048576 non-zero of 1048576 entries, 10 shown; --dump FILE.json writes them all)"}
	at := 0
	for _, want := range order {
		i := strings.Index(out[at:], want)
		if i < 0 {
			t.Fatalf("output lacks %q after byte %d:\n%s", want, at, out)
		}
		at += i
	}
	if lines := strings.Count(out, "\n"); lines > 80 {
		t.Errorf("%d lines of output for maps of 1M entries", lines)
	}
	if !strings.Contains(errOut, "Running "+obj+" (3 direct program(s): vec_add, gemm, hello) on GPU 0 (Fake GPU)") ||
		!strings.Contains(errOut, "gpubpf: 3 of 3 direct program(s) ran on GPU 0 (Fake GPU, driver 13000); records: 0 produced") {
		t.Errorf("start line or account missing:\n%s", errOut)
	}

	// A loop whose bound comes from a map (bpftime's direct-run GEMM):
	// run as a direct program as it is (the stand-in driver runs no PTX:
	// the launch is what it shows), accepted as a probe with the loop
	// budget, which verify and ptx say.
	loops := "../../pkg/runtime/verify/testdata/loops.bpf.o"
	out, errOut, code, _ = gpubpf(nil, "run", "--direct", "--program", "data_bounded", "--map", "dims=[4]", loops)
	if code != 0 || !strings.Contains(out, "DIRECT gpubpf_direct_data_bounded grid 1,1,1") {
		t.Errorf("a direct program with a data-bounded loop: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	out, errOut, code, _ = gpubpf(nil, "verify", "--program", "endless_probe", loops)
	if code != 0 || !strings.Contains(out, "endless_probe (kprobe/vectorAdd): ok, memory-safe however long its loops run; their bounds come from data, so each runs with an iteration budget (gpubpf run --loop-budget, default 65536 per call)") {
		t.Errorf("verify of a probe that may never end: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	out, errOut, code, _ = gpubpf(nil, "ptx", "--program", "endless_probe", loops)
	if code != 0 || !strings.Contains(out, "a call past 65536 returns 0 there") || !strings.Contains(out, "setp.gt.u64 %plb, %lb, 65536;") {
		t.Errorf("ptx of a probe that may never end: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if _, errOut, code, _ = gpubpf(nil, "run", "--loop-budget", "0", loops); code != 2 || !strings.Contains(errOut, "--loop-budget 0: want at least 1 iteration") {
		t.Errorf("--loop-budget 0: exit %d\n%s", code, errOut)
	}
	hostsLeft()

	// A GPU the machine does not have.
	_, errOut, code, _ = gpubpf(nil, "run", "--direct", "--device", "1", obj)
	if code != 1 || errOut != "gpubpf: --device 1: this machine has 1 GPU(s) (0 Fake GPU); pick one of them\n" {
		t.Errorf("--device 1: exit %d\n%s", code, errOut)
	}

	// A kernel that does not finish within -d: the host is ended, the
	// tool says so and does not wait for the kernel (its 30 s: the
	// message says -d ended it).
	_, errOut, code, _ = gpubpf([]string{"FAKECUDA_LAUNCH_STALL_MS=30000"}, "run", "--direct", "--program", "vec_add", "-d", "0.3", obj)
	if code != 1 || !strings.Contains(errOut, "gpubpf: program vec_add: its kernel did not finish within 0.3 s, so the direct-run host was ended to stop it: give it longer with -d SECONDS") {
		t.Errorf("stuck kernel: exit %d\n%s", code, errOut)
	}
	hostsLeft()
}
