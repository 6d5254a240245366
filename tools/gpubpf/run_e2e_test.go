package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpubpf/gpubpf/internal/testenv"
)

// testPTX is a real PTX module (two kernels, a __constant__, a global load
// and an atomic for memory-access probes) that fatbinary packs into a real
// fatbin container.
const testPTX = `.version 7.8
.target sm_90
.address_size 64

.const .align 4 .u32 d_N;

.visible .entry _Z6vecAddPfi(
	.param .u64 _Z6vecAddPfi_param_0,
	.param .u32 _Z6vecAddPfi_param_1
)
{
	.reg .b32 %r<3>;
	.reg .b64 %rd<3>;
	.reg .f32 %f<3>;
	ld.const.u32 %r1, [d_N];
	ld.param.u32 %r2, [_Z6vecAddPfi_param_1];
	ld.param.u64 %rd1, [_Z6vecAddPfi_param_0];
	cvta.to.global.u64 %rd2, %rd1;
	ld.global.f32 %f1, [%rd2];
	atom.global.add.f32 %f2, [%rd2+4], %f1;
	ret;
}

.visible .entry _Z5otherv()
{
	ret;
}
`

// TestRunCommandEndToEnd runs `gpubpf run -- CMD` the way a user does, on
// this GPU-less machine: the real agent preloaded into an application that
// reaches a stand-in libcuda the way cudart does and loads a real fatbin.
// Everything of gpubpf is real: hold at the module load, fetching and
// parsing the fatbin, compiling the eBPF program, instrumenting and aliasing
// the PTX, loading and activating the clone, routing the launches, and the
// exit hold that lets the tool read the maps of a program that has exited.
// (The stand-in does not execute PTX, so the counts stay 0; the GPU check
// proves those.)
func TestRunCommandEndToEnd(t *testing.T) {
	fatbinary := testenv.Tool(t, "fatbinary")
	dir := t.TempDir()
	cudaDir := testenv.BuildStandIn(t, dir).CUDADir // the agent lands next to the tool built below
	sockDir := filepath.Join(dir, "sock")
	run := func(name string, args ...string) {
		t.Helper()
		if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
	}
	ptxFile := filepath.Join(dir, "k.ptx")
	os.WriteFile(ptxFile, []byte(testPTX), 0o644)
	fb := filepath.Join(dir, "k.fatbin")
	run(fatbinary, "--create="+fb, "--image=profile=compute_90,file="+ptxFile)
	tool := filepath.Join(dir, "gpubpf") // next to libgpubpf-agent.so, as make installs them
	run("go", "build", "-o", tool, ".")

	gpubpfRunIn := func(kernel, stdin string, env ...string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
		cmd := exec.Command(tool, "run", "-j", "-k", kernel, "../../bpf/examples/counter_bpfel.o", "--", filepath.Join(dir, "app"))
		cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+cudaDir, "GPUBPF_TEST_FATBIN="+fb, "GPUBPF_AGENT_SOCKET_DIR="+sockDir)
		cmd.Env = append(cmd.Env, env...)
		cmd.Stdin = strings.NewReader(stdin)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		return cmd, &stdout, &stderr
	}
	gpubpfRun := func(kernel string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
		return gpubpfRunIn(kernel, "launch\nlaunch\nquit\n")
	}

	// A pattern that matches nothing: the program runs untouched, and the
	// tool says which kernels come closest, exit status 1 (CLI.md).
	cmd, stdout, stderr := gpubpfRun("vecAd")
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(stderr.String(), "closest: vecAdd (_Z6vecAddPfi)") {
		t.Fatalf("no-match run: %v\n%s", err, stderr.String())
	}
	if strings.Count(stdout.String(), "LAUNCH _Z6vecAddPfi") != 2 {
		t.Fatalf("the application did not run normally:\n%s", stdout.String())
	}

	cmd, stdout, stderr = gpubpfRun("_Z6vecAddPfi")
	if err := cmd.Run(); err != nil {
		t.Fatalf("gpubpf run: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	out := stdout.String()
	if n := strings.Count(out, "LAUNCH _Z6vecAddPfi"); n != 2 {
		t.Fatalf("the application launched %d times, want 2 (its output passes through):\n%s", n, out)
	}
	var summary map[string]any
	maps := map[string]bool{}
	for _, line := range strings.Split(out, "\n") {
		var o map[string]any
		if json.Unmarshal([]byte(line), &o) != nil {
			continue
		}
		switch o["type"] {
		case "summary":
			summary = o
		case "map":
			maps[o["map"].(string)+"["+o["key"].(string)+"]="+o["value"].(string)] = true
		}
	}
	if summary == nil {
		t.Fatalf("no summary line:\n%s\n%s", out, stderr.String())
	}
	if got := summary["instrumented_launches"]; got != float64(2) {
		t.Errorf("instrumented launches %v, want 2 (both routed to the clone); stderr:\n%s", got, stderr.String())
	}
	if k, _ := summary["kernels_instrumented"].([]any); len(k) != 1 || k[0] != "_Z6vecAddPfi" {
		t.Errorf("kernels instrumented %v, want [_Z6vecAddPfi]", summary["kernels_instrumented"])
	}
	// The maps were read at the exit hold, after the program had finished.
	if !maps["calls[0]=0"] || !maps["calls[1]=0"] {
		t.Errorf("map calls not reported after the program exited: %v\nstderr:\n%s", maps, stderr.String())
	}
	if strings.Contains(stderr.String(), "exited before its maps could be read") {
		t.Errorf("maps lost at exit:\n%s", stderr.String())
	}

	// Host-backed maps (1512, 1513): placed in a memfd the agent registers
	// with the driver, where the stand-in "GPU" counts each launch in
	// shared_counter[0] (FAKECUDA_HOST_BUMP); the tool reads them from its
	// own mapping every interval while the program runs, and after it has
	// exited, with no agent left to ask.
	// --prometheus too: the scrape between the second launch and the end
	// has what the interval's read has.
	promAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	cmd = exec.Command(tool, "run", "-j", "-i", "0.05", "--prometheus", promAddr, "-k", "_Z6vecAddPfi", "../../bpf/examples/host_map_bpfel.o", "--", filepath.Join(dir, "app"))
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+cudaDir, "GPUBPF_TEST_FATBIN="+fb, "GPUBPF_AGENT_SOCKET_DIR="+sockDir, "FAKECUDA_HOST_BUMP=1")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout.Reset()
	stderr.Reset()
	// the tool writes while the test reads: one lock for both
	live := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = live, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Each launch once the one before has been read live (not a fixed
	// sleep: on a loaded machine the attach or a read takes longer).
	read := func(v string) {
		t.Helper()
		want := `"key":"0","map":"shared_counter","pid":` // then the pid, the type and the value
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			for _, l := range strings.Split(live.String(), "\n") {
				if strings.Contains(l, want) && strings.Contains(l, `"value":"`+v+`"`) {
					return
				}
			}
		}
		t.Fatalf("shared_counter[0] was never read as %s within 30 s:\n%s\n%s", v, live.String(), stderr.String())
	}
	io.WriteString(in, "launch\n")
	read("1")
	io.WriteString(in, "launch\n")
	read("2")
	// the metrics follow each read's printing: scraped until they have it
	scraped := scrape(t, promAddr)
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(scraped, `gpubpf_run_account{what="instrumented launches"} 2`) ||
		!regexp.MustCompile(`key="0",map="shared_counter",pid="\d+"\} 2\n`).MatchString(scraped); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			break
		}
		scraped = scrape(t, promAddr)
	}
	// a real Prometheus server scrapes the tool; PromQL through its HTTP
	// API gives the tool's own numbers (those it prints: 2 and 2)
	prom := startPrometheus(t, promAddr)
	waitQuery(t, prom, `gpubpf_run_map_value{map="shared_counter",key="0"}`, "2")
	waitQuery(t, prom, `gpubpf_run_account{what="instrumented launches"}`, "2")
	waitQuery(t, prom, `count(gpubpf_run_process_info{comm="app"})`, "1")
	io.WriteString(in, "quit\n")
	in.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("gpubpf run host_map: %v\n%s", err, stderr.String())
	}
	stdout.WriteString(live.String())
	hostMaps := map[string]bool{}
	var counts []string // shared_counter[0], each interval, then the final read
	for _, line := range strings.Split(stdout.String(), "\n") {
		var o map[string]any
		if json.Unmarshal([]byte(line), &o) == nil && o["type"] == "map" {
			hostMaps[o["map"].(string)+"["+o["key"].(string)+"]="+o["value"].(string)] = true
			if o["map"] == "shared_counter" && o["key"] == "0" && (len(counts) == 0 || counts[len(counts)-1] != o["value"]) {
				counts = append(counts, o["value"].(string))
			}
		}
	}
	others := 0 // a per-thread slot, say: none
	for k := range hostMaps {
		if !strings.HasPrefix(k, "shared_counter[0]=") && k != "shared_counter[1]=0" {
			others++
		}
	}
	if !hostMaps["shared_counter[0]=2"] || !hostMaps["shared_counter[1]=0"] || others != 0 {
		t.Errorf("host-backed maps: %v, want shared_counter[0] up to 2 (one per launch), [1]=0, no per-thread slot\nstderr:\n%s\nstdout:\n%s", hostMaps, stderr.String(), stdout.String())
	}
	// 1 shows only between the launches: the map was read while the
	// program ran.
	if !slices.Contains(counts, "1") || counts[len(counts)-1] != "2" {
		t.Errorf("shared_counter[0] read each interval went %v, want 1 between the launches and 2 at the end: not read live", counts)
	}
	if !strings.Contains(stdout.String(), `"instrumented_launches":2`) {
		t.Errorf("host_map: the launch was not instrumented:\n%s\n%s", stdout.String(), stderr.String())
	}
	// host_map prints nothing: its trace_printk ring (which only counts
	// spent loop budgets then) is drained about once a second, not every
	// 10 ms; each drain is a round trip and driver calls in the program
	// (1.2 s at 10 ms: more than 100)
	if m := regexp.MustCompile(`"ring_drains":(\d+)`).FindStringSubmatch(stdout.String()); m == nil {
		t.Errorf("host_map: no ring_drains in the summary:\n%s", stdout.String())
	} else if n, _ := strconv.Atoi(m[1]); n > 12 {
		t.Errorf("host_map, a program that prints nothing: %d ring drains in its 1.2 s, want a few (its printk ring drained as if it printed)", n)
	}
	if !regexp.MustCompile(`(?m)^gpubpf_run_map_value\{device="0",field="",key="0",map="shared_counter",pid="\d+"\} 2$`).MatchString(scraped) ||
		!strings.Contains(scraped, `gpubpf_run_account{what="instrumented launches"} 2`) ||
		!strings.Contains(scraped, "gpubpf_run_process_info{comm=") {
		t.Errorf("--prometheus scrape after the two launches:\n%s\nwant shared_counter[0] = 2, 2 instrumented launches and the process named", scraped)
	}

	// A map shared with the CPU that the GPU only adds to (bench_shared's
	// 1504 counters): placed as a mirror in the stand-in's device memory
	// and folded into the kernel's map as the program runs and at its
	// exit, without a complaint; GPUBPF_SHARED_MAPS=direct keeps the
	// updates on the host link.
	for _, direct := range []bool{false, true} {
		var env []string
		if direct {
			env = append(env, "GPUBPF_SHARED_MAPS=direct")
		}
		cmd = exec.Command(tool, "run", "-j", "-v", "-k", "_Z6vecAddPfi", "../../bpf/bench/bench_shared.bpf.o", "--", filepath.Join(dir, "app"))
		cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+cudaDir, "GPUBPF_TEST_FATBIN="+fb, "GPUBPF_AGENT_SOCKET_DIR="+sockDir)
		cmd.Env = append(cmd.Env, env...)
		cmd.Stdin = strings.NewReader("launch\nlaunch\nquit\n")
		stdout.Reset()
		stderr.Reset()
		cmd.Stdout, cmd.Stderr = stdout, stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("gpubpf run bench_shared (direct %v): %v\n%s", direct, err, stderr.String())
		}
		gathered := strings.Contains(stdout.String(), `"shared_maps_gathered":["shared_counts"]`)
		said := strings.Contains(stderr.String(), "map shared_counts (shared with the CPU): the GPU only adds to it")
		if gathered == direct || said == direct || strings.Contains(stderr.String(), "adding the GPU's updates") ||
			!strings.Contains(stdout.String(), `"instrumented_launches":2`) || !strings.Contains(stdout.String(), `"map":"shared_counts"`) {
			t.Errorf("bench_shared, GPUBPF_SHARED_MAPS=direct %v: mirrored %v, said %v; want %v\nstdout:\n%s\nstderr:\n%s", direct, gathered, said, !direct, stdout.String(), stderr.String())
		}
	}

	// Two devices: maps and clones go only where the program works, the
	// second device once the program starts using it.
	devicesOf := func(out string) string {
		devs := map[string]bool{}
		for _, line := range strings.Split(out, "\n") {
			var o map[string]any
			if json.Unmarshal([]byte(line), &o) == nil && o["type"] == "map" {
				devs[fmt.Sprint(o["device"])] = true
			}
		}
		return fmt.Sprint(devs)
	}
	cmd, stdout, stderr = gpubpfRunIn("_Z6vecAddPfi", "launch\nquit\n", "FAKECUDA_DEVICES=2")
	if err := cmd.Run(); err != nil {
		t.Fatalf("gpubpf run, 2 devices: %v\n%s", err, stderr.String())
	}
	if got := devicesOf(stdout.String()); got != "map[0:true]" {
		t.Errorf("program on device 0 of 2: maps placed on %s, want device 0 only\n%s", got, stderr.String())
	}
	cmd, stdout, stderr = gpubpfRunIn("_Z6vecAddPfi", "launch\nretain1\nlaunch\nquit\n", "FAKECUDA_DEVICES=2")
	if err := cmd.Run(); err != nil {
		t.Fatalf("gpubpf run, 2 devices: %v\n%s", err, stderr.String())
	}
	if got := devicesOf(stdout.String()); got != "map[0:true 1:true]" {
		t.Errorf("program that starts on device 1: maps placed on %s, want devices 0 and 1\n%s", got, stderr.String())
	}
	if !strings.Contains(stdout.String(), "RETAINED 1 0") {
		t.Errorf("the program's retain of device 1 failed:\n%s", stdout.String())
	}

	// Kernels in several modules of one process share every map, as in the
	// Linux kernel: the executable's fatbin (a context-independent library)
	// and PTX loaded at run time into the device's primary context get one
	// copy of counter's map, reported once. A context the application
	// creates itself (cuCtxCreate) gets a copy of its own, labelled with it.
	mapRecords := func(out string) map[string]int {
		recs := map[string]int{}
		for _, line := range strings.Split(out, "\n") {
			var o map[string]any
			if json.Unmarshal([]byte(line), &o) == nil && o["type"] == "map" {
				recs[fmt.Sprintf("%v/%v %v[%v]", o["device"], o["context"], o["map"], o["key"])]++
			}
		}
		return recs
	}
	for _, tc := range []struct {
		name, stdin string
		want        map[string]int
	}{
		{"primary context", "launch\nmodload\nmodlaunch\nquit\n",
			map[string]int{"0/<nil> calls[0]": 1, "0/<nil> calls[1]": 1}},
		{"a context of its own", "launch\nownctx\nmodload\nmodlaunch\nprimary\nquit\n",
			map[string]int{"0/<nil> calls[0]": 1, "0/<nil> calls[1]": 1, "0/0x calls[0]": 1, "0/0x calls[1]": 1}},
		// unloaded and loaded again: the new module's clone uses the
		// same map (its launch is the second instrumented one)
		{"a module loaded again", "modload\nmodlaunch\nmodunload\nmodload\nmodlaunch\nquit\n",
			map[string]int{"0/<nil> calls[0]": 1, "0/<nil> calls[1]": 1}},
	} {
		cmd, stdout, stderr = gpubpfRunIn("*", tc.stdin)
		if err := cmd.Run(); err != nil {
			t.Fatalf("gpubpf run, %s: %v\n%s", tc.name, err, stderr.String())
		}
		out := stdout.String()
		if !strings.Contains(out, "MODLOADED 0") || !strings.Contains(out, "MODLAUNCHED 0") {
			t.Fatalf("%s: the program's module load or launch failed:\n%s", tc.name, out)
		}
		got := map[string]int{}
		for k, n := range mapRecords(out) {
			// the own context's handle differs from run to run
			if i := strings.Index(k, "/0x"); i >= 0 {
				k = k[:i+3] + k[strings.Index(k, " "):]
			}
			got[k] += n
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: map records %v, want %v (one per device, context, map and key)\n%s\n%s", tc.name, got, tc.want, out, stderr.String())
		}
		if !strings.Contains(out, `"instrumented_launches":2`) || !strings.Contains(out, "_Z6modKerv") {
			t.Errorf("%s: both modules' launches should be instrumented:\n%s\n%s", tc.name, out, stderr.String())
		}
	}

	// A memory-access program in bpftime's section goes into every kernel
	// (the fake driver runs none, so its counts stay empty); the start
	// line, -v and the kernel-index legend say so.
	cmd = exec.Command(tool, "run", "-v", "../../bpf/examples/mem_trace_bpfel.o", "--", filepath.Join(dir, "app"))
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+cudaDir, "GPUBPF_TEST_FATBIN="+fb, "GPUBPF_AGENT_SOCKET_DIR="+sockDir)
	cmd.Stdin = strings.NewReader("launch\nquit\n")
	stdout, stderr = &bytes.Buffer{}, &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("gpubpf run mem_trace: %v\n%s", err, stderr.String())
	}
	for _, want := range []string{
		"(1 memory-access program(s) at every global load/store/atomic of every kernel)",
		// one clone for both (same PTX, same programs): the global load
		// and the atomic of vecAdd, not its ld.const of d_N
		"_Z6vecAddPfi, _Z5otherv instrumented (2 handle(s)",
		"2 memory-access site(s))",
		"kernels instrumented: _Z5otherv, _Z6vecAddPfi;",
	} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("gpubpf run mem_trace: stderr lacks %q:\n%s", want, stderr.String())
		}
	}
	for _, want := range []string{"accesses (GPU hash", "sizes (GPU hash", "kernel indexes (bpf_gpu_kernel_index):\n  0: vecAdd (_Z6vecAddPfi)\n  4294967295: "} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("gpubpf run mem_trace: stdout lacks %q:\n%s", want, stdout.String())
		}
	}
}

// scrape is the text exposition at addr/metrics, as Prometheus asks for it.
func scrape(t *testing.T, addr string) string {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+addr+"/metrics", nil)
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("scrape %s: %v", addr, err)
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// lockedBuffer is a bytes.Buffer a command writes to while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
