package gpuevent_snoop

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpubpf/gpubpf/internal/testenv"
)

// Built once per test binary: the tool and the fake-CUDA programs.
var (
	buildOnce sync.Once
	buildErr  error
	workDir   string
	toolBin   string
)

// TestMain removes what build made once for the whole test binary (13 MB
// a run).
func TestMain(m *testing.M) {
	code := m.Run()
	if workDir != "" {
		os.RemoveAll(workDir)
	}
	os.Exit(code)
}

func build(t testing.TB) {
	t.Helper()
	testenv.Root(t)
	gcc := testenv.Tool(t, "gcc")
	buildOnce.Do(func() {
		workDir, buildErr = os.MkdirTemp("", "gpuevent_snoop_test")
		if buildErr != nil {
			return
		}
		td, _ := filepath.Abs("testdata")
		agentSrc, _ := filepath.Abs("../../pkg/runtime/agent")
		toolBin = filepath.Join(workDir, "gpuevent_snoop")
		steps := [][]string{
			// the one binary, linked under the tool's name, as make
			// installs it
			{"go", "build", "-o", filepath.Join(workDir, "gpubpf"), "../gpubpf"},
			{"ln", "-s", "gpubpf", toolBin},
			// The agent next to the tool, as make installs them: a command
			// the tool starts runs with it preloaded (agentswitch.go).
			{"make", "-s", "-C", agentSrc, "AGENT_BIN_DIR=" + workDir, "CC=" + gcc},
			{gcc, "-O2", "-fPIC", "-shared", "-Wl,-soname,libcuda.so.1", "-o", filepath.Join(workDir, "libcuda.so.1"), filepath.Join(td, "fakecuda_driver.c")},
			{gcc, "-O2", "-fPIC", "-shared", "-Wl,-soname,libcudart.so.12", "-o", filepath.Join(workDir, "libcudart.so.12"),
				filepath.Join(td, "fakecuda_runtime.c"), "-L" + workDir, "-l:libcuda.so.1", "-Wl,-rpath,$ORIGIN"},
			{gcc, "-O2", "-o", filepath.Join(workDir, "app_shared"), filepath.Join(td, "app.c"), "-I" + td, "-L" + workDir,
				"-l:libcudart.so.12", "-l:libcuda.so.1", "-Wl,-rpath,$ORIGIN", "-lpthread"},
			{gcc, "-O2", "-o", filepath.Join(workDir, "app_static"), filepath.Join(td, "app.c"),
				filepath.Join(td, "fakecuda_runtime.c"), filepath.Join(td, "fakecuda_driver.c"), "-I" + td, "-lpthread"},
			{gcc, "-O2", "-o", filepath.Join(workDir, "drvlookup"), filepath.Join(td, "drvlookup.c"), "-I" + td, "-ldl", "-Wl,-rpath,$ORIGIN"},
			// A launch storm against the agent's stand-in driver, which
			// has what the agent needs (agentswitch_e2e_test.go).
			{"mkdir", "-p", filepath.Join(workDir, "agentcuda")},
			{gcc, "-O1", "-fPIC", "-shared", "-pthread", "-Wl,-Bsymbolic-functions", "-Wl,-soname,libcuda.so.1", "-o",
				filepath.Join(workDir, "agentcuda", "libcuda.so.1"), filepath.Join(agentSrc, "testdata", "fakecuda.c")},
			{gcc, "-O2", "-o", filepath.Join(workDir, "agentstorm"), filepath.Join(td, "agentstorm.c"), "-ldl", "-pthread",
				"-Wl,-rpath,$ORIGIN/agentcuda"},
			// The CPU proxy of the launch-rate benchmark (bench_test.go):
			// static cudart (nvcc's default) and -cudart shared, both
			// opening the driver with dlopen as the real cudart does.
			{"mkdir", "-p", filepath.Join(workDir, "bench")},
			{gcc, "-O2", "-fPIC", "-shared", "-Wl,-soname,libcuda.so.1", "-o", filepath.Join(workDir, "bench", "libcuda.so.1"), filepath.Join(td, "bench", "fakedrv.c")},
			{gcc, "-O2", "-fPIC", "-shared", "-Wl,-soname,libcudart.so.12", "-o", filepath.Join(workDir, "bench", "libcudart.so.12"),
				filepath.Join(td, "bench", "fakert.c"), "-Wl,-rpath,$ORIGIN", "-ldl", "-lpthread"},
			{gcc, "-O2", "-o", filepath.Join(workDir, "bench", "launch_heavy"), filepath.Join(td, "bench", "launch_heavy.c"),
				filepath.Join(td, "bench", "fakert.c"), "-Wl,-rpath,$ORIGIN", "-ldl", "-lpthread"},
			{gcc, "-O2", "-o", filepath.Join(workDir, "bench", "launch_heavy_shared"), filepath.Join(td, "bench", "launch_heavy.c"),
				"-L" + filepath.Join(workDir, "bench"), "-l:libcudart.so.12", "-Wl,-rpath,$ORIGIN"},
		}
		for _, s := range steps {
			out, err := exec.Command(s[0], s[1:]...).CombinedOutput()
			if err != nil {
				buildErr = fmt.Errorf("%s: %v\n%s", strings.Join(s, " "), err, out)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
}

type record map[string]any

func (r record) str(k string) string { s, _ := r[k].(string); return s }
func (r record) num(k string) float64 {
	f, _ := r[k].(float64)
	return f
}

func parseJSONLines(t *testing.T, out []byte) []record {
	t.Helper()
	var recs []record
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "{") {
			continue // the traced program's own output passes through
		}
		var r record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("bad JSON line %q: %v", line, err)
		}
		recs = append(recs, r)
	}
	return recs
}

// expected is the exact call sequence app.c makes, as the tool must report
// it: runtime calls once (their driver calls folded), driver calls made
// directly by the program reported as driver calls.
var expected = []struct{ api, detail string }{
	{"cudaMalloc", "size=1048576"},
	{"cudaMalloc", "size=4096"},
	{"cudaMalloc", "size=12345 leak"},
	{"cudaMemcpy", "H2D 1048576"},
	{"cudaMemcpy", "D2H 65536"},
	{"cudaMemcpyAsync", "D2D 4096"},
	{"cudaMemset", "1000"},
	{"cudaLaunchKernel", "vecAdd"},
	{"cudaMalloc", "fails"},
	{"cuMemAlloc_v2", "size=777"},
	{"cuLaunchKernel", "0xf00"},
	{"cuMemFree_v2", ""},
	{"cudaMalloc", "size=2048 (thread)"},
	{"cudaFree", "(thread)"},
	{"cudaFree", ""},
	{"cudaFree", ""},
}

func checkAppTrace(t *testing.T, recs []record, pid int, exe string, withArgs bool) {
	t.Helper()
	var events []record
	var leaks []record
	var account record
	for _, r := range recs {
		switch r.str("type") {
		case "leak":
			if int(r.num("pid")) == pid {
				leaks = append(leaks, r)
			}
		case "account":
			account = r
		case "summary", "kernel":
		default:
			if int(r.num("pid")) == pid {
				events = append(events, r)
			}
		}
	}
	// The worker thread's two calls may interleave with the main thread's
	// only where app.c allows: it runs between cuMemFree_v2 and the last
	// two frees, so the order is fixed.
	if len(events) != len(expected) {
		for _, e := range events {
			t.Logf("event: %v", e)
		}
		t.Fatalf("got %d events, want exactly %d", len(events), len(expected))
	}
	for i, want := range expected {
		if got := events[i].str("api"); got != want.api {
			t.Errorf("event %d: api %s, want %s", i, got, want.api)
		}
	}
	e := events
	wantNum := func(i int, k string, v float64) {
		t.Helper()
		if got := e[i].num(k); got != v {
			t.Errorf("event %d (%s): %s = %v, want %v", i, e[i].str("api"), k, got, v)
		}
	}
	wantStr := func(i int, k, v string) {
		t.Helper()
		if got := e[i].str(k); got != v {
			t.Errorf("event %d (%s): %s = %q, want %q", i, e[i].str("api"), k, got, v)
		}
	}
	wantNum(0, "size", 1<<20)
	wantStr(0, "ptr", "0x7f0000000000")
	wantNum(1, "size", 4096)
	wantNum(2, "size", 12345)
	if !strings.HasPrefix(e[2].str("caller"), "leaky_alloc+") {
		t.Errorf("leaky allocation's caller = %q, want leaky_alloc+...", e[2].str("caller"))
	}
	wantStr(3, "kind", "H2D")
	wantNum(3, "bytes", 1<<20)
	wantStr(4, "kind", "D2H")
	wantNum(4, "bytes", 65536)
	wantStr(5, "kind", "D2D")
	wantNum(5, "bytes", 4096)
	wantStr(5, "stream", "0x1234")
	if e[5]["sync"] != false || e[3]["sync"] != true {
		t.Errorf("sync flags: cudaMemcpy %v, cudaMemcpyAsync %v", e[3]["sync"], e[5]["sync"])
	}
	wantNum(6, "bytes", 1000)
	wantNum(6, "value", 7)
	wantStr(7, "kernel", "vecAdd(float const*, float const*, float*, int)")
	wantStr(7, "kernel_mangled", "_Z6vecAddPKfS0_Pfi")
	if fmt.Sprint(e[7]["grid"]) != "[4 2 1]" || fmt.Sprint(e[7]["block"]) != "[256 1 1]" {
		t.Errorf("launch dims grid %v block %v, want [4 2 1] [256 1 1]", e[7]["grid"], e[7]["block"])
	}
	wantNum(7, "shmem", 128)
	wantStr(7, "stream", "0x1234")
	if withArgs && fmt.Sprint(e[7]["args"]) != "[0x7f0000000000 0x7f0000100000 0x7f0000000000]" {
		t.Errorf("kernel args (-a 3) %v, want the three device pointers", e[7]["args"])
	}
	if !withArgs && e[7]["args"] != nil {
		t.Errorf("kernel args %v without -a", e[7]["args"])
	}
	wantNum(8, "ret", 2)
	wantStr(8, "error", "cudaErrorMemoryAllocation")
	wantNum(8, "size", 1<<40)
	wantStr(9, "layer", "driver")
	wantNum(9, "size", 777)
	wantStr(10, "kernel", "CUfunction:0xf00")
	if fmt.Sprint(e[10]["grid"]) != "[1 2 3]" || fmt.Sprint(e[10]["block"]) != "[32 4 1]" {
		t.Errorf("cuLaunchKernel dims grid %v block %v, want [1 2 3] [32 4 1]", e[10]["grid"], e[10]["block"])
	}
	wantNum(10, "shmem", 64)
	wantStr(10, "stream", "0x55")
	wantNum(11, "size", 777)
	wantNum(12, "size", 2048)
	if e[12].num("tid") == float64(pid) {
		t.Errorf("the worker thread's cudaMalloc reports the main thread's TID")
	}
	wantNum(13, "size", 2048)
	wantNum(14, "size", 1<<20)
	wantNum(15, "size", 4096)
	for i := range e {
		if i != 8 {
			wantNum(i, "ret", 0)
		}
		if e[i].num("dur_ns") <= 0 {
			t.Errorf("event %d: no duration", i)
		}
	}

	if len(leaks) != 1 {
		t.Fatalf("leak report: %v, want exactly the planted leak", leaks)
	}
	l := leaks[0]
	if l.num("bytes") != 12345 || l.num("allocs") != 1 || !strings.HasPrefix(l.str("site"), "leaky_alloc+") ||
		!strings.Contains(l.str("site"), "("+exe+")") {
		t.Errorf("leak %v: want 1 allocation of 12345 bytes at leaky_alloc+... (%s)", l, exe)
	}
	if account == nil {
		t.Fatal("no account line")
	}
	if account.num("processes") > 1 {
		return // tracing all: other processes' calls count too
	}
	if account.num("events") != 16 || account.num("dropped_ringbuf") != 0 || account.num("lost_inflight") != 0 {
		t.Errorf("account %v: want 16 events, none dropped or lost", account)
	}
	// Each runtime call of the fake cudart calls one driver function except
	// cudaMemset (5 mallocs, 3 copies, 1 launch, 3 frees).
	if account.num("nested_folded") != 12 {
		t.Errorf("account %v: want 12 nested driver calls folded", account)
	}
}

func runTool(t *testing.T, args ...string) (stdout, stderr []byte, code int) {
	t.Helper()
	cmd := exec.Command(toolBin, args...)
	cmd.Dir = workDir
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	code = cmd.ProcessState.ExitCode()
	if err != nil && code < 0 {
		t.Fatalf("running the tool: %v", err)
	}
	return o.Bytes(), e.Bytes(), code
}

// startTool starts the tool (env nil: ours) and waits for its start line on
// stderr, which comes once every probe is attached; the rest of stderr is
// left in the returned reader.
func startTool(t *testing.T, env []string, args ...string) (tool *exec.Cmd, stdout *bytes.Buffer, stderr *bufio.Reader, start string) {
	t.Helper()
	tool = exec.Command(toolBin, args...)
	tool.Env = env
	stdout = &bytes.Buffer{}
	tool.Stdout = stdout
	errPipe, _ := tool.StderrPipe()
	if err := tool.Start(); err != nil {
		t.Fatal(err)
	}
	stderr = bufio.NewReader(errPipe)
	start, err := stderr.ReadString('\n')
	if err != nil || !strings.Contains(start, "Hit Ctrl-C to end.") {
		t.Fatalf("start line %q: %v", start, err)
	}
	return tool, stdout, stderr, start
}

func TestCommandSharedCudart(t *testing.T) { testCommand(t, "app_shared") }
func TestCommandStaticCudart(t *testing.T) { testCommand(t, "app_static") }

// Kernels without uprobe sessions (before 6.13) take every return with an
// entry and a return link: same trace.
func TestCommandNoSessions(t *testing.T) {
	t.Setenv("GPUEVENT_SNOOP_NO_SESSIONS", "1")
	testCommand(t, "app_shared")
}

// Kernels built without BTF get the object without sessions and without
// the CO-RE read of the executable's load address: same trace, entry and
// return links.
func TestCommandNoBTF(t *testing.T) {
	t.Setenv("GPUEVENT_SNOOP_NO_BTF", "1")
	testCommand(t, "app_shared")
}

// Kernels without uprobe_multi links get one link per probe: same trace.
func TestCommandSingleUprobes(t *testing.T) {
	t.Setenv("GPUEVENT_SNOOP_SINGLE_UPROBES", "1")
	testCommand(t, "app_shared")
}

func testCommand(t *testing.T, app string) {
	build(t)
	t0 := time.Now()
	out, errOut, code := runTool(t, "-j", "-a", "3", "--", "./"+app)
	t.Logf("traced run took %v", time.Since(t0))
	if code != 0 {
		t.Fatalf("exit %d\nstderr: %s", code, errOut)
	}
	if !bytes.Contains(out, []byte("app done")) {
		t.Errorf("the traced program's stdout did not pass through: %s", out)
	}
	recs := parseJSONLines(t, out)
	pid := 0
	for _, r := range recs {
		if r.str("comm") == app {
			pid = int(r.num("pid"))
			break
		}
	}
	if pid == 0 {
		t.Fatalf("no event from %s\nstdout: %s\nstderr: %s", app, out, errOut)
	}
	checkAppTrace(t, recs, pid, app, true)
	if !bytes.Contains(errOut, []byte("gpuevent_snoop: 16 events")) {
		t.Errorf("stderr lacks the account line: %s", errOut)
	}
	// What observed each layer, and the cost: app.c calls the driver's
	// launch function itself, so it is probed there; its two launches
	// are each the first of their configuration (entry and return), and
	// cudart's launch goes on to the driver's probe, folded: under
	// sessions without its return (5 hits), else with it (6).
	acc := accountOf(t, recs)
	mech, hits := "uprobe sessions", 5.0
	if os.Getenv("GPUEVENT_SNOOP_SINGLE_UPROBES") != "" {
		mech, hits = "single uprobes+uretprobes", 6
	} else if os.Getenv("GPUEVENT_SNOOP_NO_SESSIONS") != "" || os.Getenv("GPUEVENT_SNOOP_NO_BTF") != "" {
		mech, hits = "uprobes+uretprobes", 6
	}
	if !strings.HasPrefix(acc.str("runtime_layer"), mech+" on ") || !strings.HasPrefix(acc.str("driver_layer"), mech+" on ") ||
		acc.num("launches") != 2 || acc.num("launches_checked") != 2 || acc.num("launch_probe_hits") != hits {
		t.Errorf("account %v: want both layers by %s, 2 launches checked, %v launch probe hits", acc, mech, hits)
	}
	for _, want := range []string{"runtime layer by " + mech + " on ", fmt.Sprintf("%.2f probe hits per launch", hits/2)} {
		if !bytes.Contains(errOut, []byte(want)) {
			t.Errorf("stderr account lacks %q: %s", want, errOut)
		}
	}
}

func accountOf(t *testing.T, recs []record) record {
	t.Helper()
	for _, r := range recs {
		if r.str("type") == "account" {
			return r
		}
	}
	t.Fatal("no account record")
	return nil
}

// With only libcudart probed, the kernel stubs and call sites are in the
// executable, which no probe locates: they are named from its symbols
// through the load address the events carry, also when the process exited
// before the tool read its mappings (app_shared planted exits at once).
func TestSharedCudartNamesFromExecutable(t *testing.T) {
	build(t)
	for _, flags := range [][]string{nil, {"--no-driver"}} {
		out, errOut, code := runTool(t, append(append([]string{"-j"}, flags...), "--", "./app_shared", "planted")...)
		if code != 0 {
			t.Fatalf("%v: exit %d\nstderr: %s", flags, code, errOut)
		}
		var launch, malloc record
		for _, r := range parseJSONLines(t, out) {
			switch r.str("type") {
			case "launch":
				launch = r
			case "malloc":
				malloc = r
			}
		}
		if launch == nil || launch.str("kernel") != "plantedKernel(float*, int)" || launch.str("kernel_mangled") != "_Z13plantedKernelPfi" {
			t.Errorf("%v: launch %v, want plantedKernel(float*, int)", flags, launch)
		}
		if malloc == nil || !strings.HasPrefix(malloc.str("caller"), "main+0x") || !strings.HasSuffix(malloc.str("caller"), "(app_shared)") {
			t.Errorf("%v: malloc %v, want caller main+0x... (app_shared)", flags, malloc)
		}
		text, errOut, _ := runTool(t, append(flags, "--", "./app_shared", "planted")...)
		for _, want := range []string{"OK   plantedKernel grid=(2,1,1) block=(64,1,1)", "caller=main+0x", "│ main+0x"} {
			if !bytes.Contains(text, []byte(want)) {
				t.Errorf("%v: text stream lacks %q:\n%s%s", flags, want, text, errOut)
			}
		}
	}
}

// A program whose launches all go through cudart (the stand-in of
// launch_heavy, with static and with shared cudart) pays one probe hit per
// launch: the driver's launch functions are not probed in it, and only the
// first launch of each configuration (one per stream) and one in 64 have
// their return taken. Every launch is still reported, with its name. The
// probe path (--no-agent); with the agent (the default for a command when
// its library is found) the launches come from it after the first
// milliseconds: TestCommandAgentSwitchMidLaunches.
func TestOneProbeHitPerLaunch(t *testing.T) {
	if os.Getenv("GPUEVENT_SNOOP_SINGLE_UPROBES") != "" {
		t.Skip("single uprobes name no process: the driver's launch functions are probed in all")
	}
	build(t)
	const n = 5000
	for _, bin := range []string{"launch_heavy", "launch_heavy_shared"} {
		out, errOut, code := runTool(t, "-j", "--no-agent", "--", filepath.Join(workDir, "bench", bin), fmt.Sprint(n), "4", "quiet")
		if code != 0 {
			t.Fatalf("%s: exit %d\nstderr: %s", bin, code, errOut)
		}
		recs := parseJSONLines(t, out)
		launches, unchecked := 0, 0
		for _, r := range recs {
			if r.str("type") != "launch" {
				continue
			}
			launches++
			if r.str("kernel") != "tick(unsigned int*, int, long long)" {
				t.Fatalf("%s: launch %v, want tick(...)", bin, r)
			}
			if r["ret"] == nil {
				unchecked++
				if r["dur_ns"] != nil || r["error"] != nil {
					t.Errorf("%s: unchecked launch %v has a result", bin, r)
				}
			}
		}
		acc := accountOf(t, recs)
		checked := n + 1 - unchecked
		// Without sessions (forced here, or a kernel before 6.13) every
		// launch takes its return: two hits.
		// The one-in-64 counter is per CPU: each CPU the launching thread
		// ran on may add its first launch (seen: 84 of 5001 under load).
		minChecked, maxChecked, maxHits := 4, 4+(n+1)/64+goruntime.NumCPU(), 1.05
		if os.Getenv("GPUEVENT_SNOOP_NO_SESSIONS") != "" {
			minChecked, maxChecked, maxHits = n+1, n+1, 2
		}
		if launches != n+1 || acc.num("launches") != n+1 || int(acc.num("launches_checked")) != checked ||
			checked < minChecked || checked > maxChecked {
			t.Errorf("%s: %d launches shown, %d checked; account %v", bin, launches, checked, acc)
		}
		if h := acc.num("probe_hits_per_launch"); h < 1 || h > maxHits || acc.str("driver_launch_probes") != "in 0 of 1 processes" {
			t.Errorf("%s: account %v: want about 1 probe hit per launch and no driver launch probes", bin, acc)
		}
		if !bytes.Contains(errOut, []byte(" probe hits per launch")) || !bytes.Contains(errOut, []byte("its launch functions in 0 of 1 processes")) {
			t.Errorf("%s: stderr account: %s", bin, errOut)
		}
	}
}

// A program that launches through the driver by a name it builds at run
// time (as ctypes or a JIT does) shows it only by looking a kernel up
// outside cudart: from then on its driver launches are probed (--no-agent;
// with the agent preloaded its lookup comes through the agent's wrapper,
// which says nothing about the caller, and the launch a second later comes
// from the agent).
func TestDriverLaunchesAfterLookup(t *testing.T) {
	build(t)
	out, errOut, code := runTool(t, "-j", "--", "./drvlookup")
	if code != 0 {
		t.Fatalf("exit %d\nstderr: %s", code, errOut)
	}
	recs := parseJSONLines(t, out)
	var got []string
	for _, r := range recs {
		if r.str("type") == "launch" {
			got = append(got, r.str("api")+":"+r.str("kernel"))
		}
	}
	if acc := accountOf(t, recs); fmt.Sprint(got) != "[cuLaunchKernel:jitgemm()]" || acc.num("launches_from_agent") != 1 {
		t.Errorf("with the agent: launches %v, account %v; want [cuLaunchKernel:jitgemm()] from the agent\nstderr: %s", got, acc, errOut)
	}

	out, errOut, code = runTool(t, "-j", "--no-agent", "--", "./drvlookup")
	if code != 0 {
		t.Fatalf("exit %d\nstderr: %s", code, errOut)
	}
	recs = parseJSONLines(t, out)
	got = nil
	for _, r := range recs {
		if r.str("type") == "launch" {
			got = append(got, r.str("api")+":"+r.str("kernel"))
		}
	}
	if fmt.Sprint(got) != "[cuLaunchKernel:jitgemm()]" {
		t.Errorf("launches %v, want [cuLaunchKernel:jitgemm()]\nstderr: %s", got, errOut)
	}
	acc := accountOf(t, recs)
	want := "in 1 of 1 processes (cuModuleGetFunction called from main+0x"
	if os.Getenv("GPUEVENT_SNOOP_SINGLE_UPROBES") != "" {
		want = "in every process" // links name no process
	}
	if !strings.HasPrefix(acc.str("driver_launch_probes"), want) {
		t.Errorf("account %v: want driver launch probes %q...", acc, want)
	}
}

// Launch failures are reported as such although most launches are
// reported from their entry: the first failing launch is a new
// configuration, and after a failure every launch's return is taken (the
// probe path, --no-agent). With the agent, every launch comes with its
// result: the failures are reported, with the driver's CUresult (the
// stand-in cudart turns CUDA_ERROR_INVALID_HANDLE into
// cudaErrorInvalidDeviceFunction, which only a runtime probe sees).
func TestLaunchFailuresReported(t *testing.T) {
	build(t)
	const n = 300
	out, errOut, code := runTool(t, "-j", "--", "./app_shared", "fail", fmt.Sprint(n))
	if code != 0 {
		t.Fatalf("exit %d\nstderr: %s", code, errOut)
	}
	var launches, failed int
	for _, r := range parseJSONLines(t, out) {
		if r.str("type") == "launch" {
			launches++
			if r["ret"] != nil && r.num("ret") != 0 {
				failed++
			}
		}
	}
	if launches != 3*n || failed != n {
		t.Errorf("with the agent: %d launches, %d failed; want %d failures of %d launches\nstderr: %s", launches, failed, n, 3*n, errOut)
	}

	out, errOut, code = runTool(t, "-j", "--no-agent", "--", "./app_shared", "fail", fmt.Sprint(n))
	if code != 0 {
		t.Fatalf("exit %d\nstderr: %s", code, errOut)
	}
	var fails, ok, unchecked int
	for _, r := range parseJSONLines(t, out) {
		if r.str("api") != "cudaLaunchKernel" {
			continue
		}
		switch {
		case r["ret"] == nil:
			unchecked++
		case r.str("error") == "cudaErrorInvalidDeviceFunction":
			fails++
		case r.num("ret") == 0:
			ok++
		}
	}
	if fails != n || fails+ok+unchecked != 3*n {
		t.Errorf("%d failures, %d OK, %d unchecked; want %d failures of %d launches\nstderr: %s", fails, ok, unchecked, n, 3*n, errOut)
	}
}

// The text stream and leak table, as a user sees them.
func TestTextStream(t *testing.T) {
	build(t)
	out, errOut, code := runTool(t, "-T", "--", "./app_static")
	if code != 0 {
		t.Fatalf("exit %d\nstderr: %s", code, errOut)
	}
	s := string(out)
	for _, want := range []string{
		"TIME(s)", "cudaMemcpy             OK   H2D 1048576 bytes sync",
		"cudaLaunchKernel       OK   vecAdd grid=(4,2,1) block=(256,1,1) shmem=128 stream=0x1234",
		"FAIL cudaErrorMemoryAllocation(2) size=1099511627776",
		"Leaks: 1 device allocations (12.06 KiB) never freed",
		"leaky_alloc+",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	if !strings.Contains(string(errOut), "Tracing CUDA malloc, free, memcpy, memset, launch, graph calls in PID") ||
		!strings.Contains(string(errOut), "Hit Ctrl-C to end.") {
		t.Errorf("no start line on stderr: %s", errOut)
	}
}

// Filters: -e, --min-size, -k.
func TestFilters(t *testing.T) {
	build(t)
	out, errOut, code := runTool(t, "-j", "-e", "malloc,launch", "--min-size", "4K", "-k", "vecAdd", "--", "./app_shared")
	if code != 0 {
		t.Fatalf("exit %d\nstderr: %s", code, errOut)
	}
	var got []string
	for _, r := range parseJSONLines(t, out) {
		switch r.str("type") {
		case "malloc", "launch":
			got = append(got, fmt.Sprintf("%s:%v", r.str("api"), r["size"]))
		case "free", "memcpy", "memset":
			t.Errorf("-e malloc,launch let through %v", r)
		}
	}
	// 777 and 2048 bytes are under 4 KiB; cuLaunchKernel's handle is no vecAdd.
	want := "[cudaMalloc:1.048576e+06 cudaMalloc:4096 cudaMalloc:12345 cudaLaunchKernel:<nil> cudaMalloc:1.099511627776e+12]"
	if fmt.Sprint(got) != want {
		t.Errorf("filtered events %v, want %s", got, want)
	}
}

// -p: attach to a running process, which waits on stdin until the tool is up.
func TestAttachPID(t *testing.T) {
	build(t)
	out, pid := attachPID(t, "wait")
	checkAppTrace(t, parseJSONLines(t, out), pid, "app_shared", false)
}

// -p after the program looked its kernel up: the handle is read from the
// host stub's static.
func TestAttachPIDStubHandle(t *testing.T) {
	build(t)
	out, _ := attachPID(t, "stub")
	var got []string
	for _, r := range parseJSONLines(t, out) {
		if r.str("type") == "launch" {
			got = append(got, r.str("kernel"))
		}
	}
	if want := "[vectorAdd(float const*, float const*, float*, int)]"; fmt.Sprint(got) != want {
		t.Errorf("launches %v, want %s", got, want)
	}
}

// attachPID runs app_shared MODE, attaches the tool with -p once its
// libraries are mapped, lets it go on and returns the tool's stdout.
func attachPID(t *testing.T, mode string) ([]byte, int) {
	t.Helper()
	app := exec.Command(filepath.Join(workDir, "app_shared"), mode)
	stdin, _ := app.StdinPipe()
	var appOut bytes.Buffer
	app.Stdout = &appOut
	if err := app.Start(); err != nil {
		t.Fatal(err)
	}
	defer app.Process.Kill()
	// Wait for the dynamic linker to map the libraries.
	deadline := time.Now().Add(5 * time.Second)
	for {
		maps, _ := os.ReadFile(fmt.Sprintf("/proc/%d/maps", app.Process.Pid))
		if bytes.Contains(maps, []byte("libcudart.so.12")) || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	tool, out, errr, _ := startTool(t, nil, "-j", "-p", fmt.Sprint(app.Process.Pid))
	stdin.Write([]byte("x"))
	stdin.Close()
	if err := app.Wait(); err != nil {
		t.Fatalf("app: %v", err)
	}
	// The tool ends by itself once every traced process has exited.
	errb, _ := io.ReadAll(errr)
	done := make(chan error, 1)
	go func() { done <- tool.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("tool: %v\n%s", err, errb)
		}
	case <-time.After(10 * time.Second):
		tool.Process.Signal(syscall.SIGINT)
		t.Fatalf("the tool did not end after the traced process exited")
	}
	return out.Bytes(), app.Process.Pid
}

func TestErrors(t *testing.T) {
	build(t)
	cases := []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"-p", "999999999"}, 1, "process 999999999 does not exist"},
		{[]string{"-e", "mallocs"}, 2, `unknown event kind "mallocs"`},
		{[]string{"-p", "1", "--", "true"}, 2, "not both"},
		{[]string{"--min-size", "lots"}, 2, "not a byte count"},
		{[]string{"-a", "9"}, 2, "0 to 8"},
		{[]string{"-e", "launch", "-k", "gemm*", "--", "./app_static"}, 1, "no launched kernel matched -k gemm*; kernels launched: CUfunction:0xf00, vecAdd"},
	}
	for _, c := range cases {
		_, errOut, code := runTool(t, c.args...)
		if code != c.code || !strings.Contains(string(errOut), c.msg) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d with %q", c.args, code, errOut, c.code, c.msg)
		}
	}
	// A process that is no CUDA program: say what was looked for.
	sleep := exec.Command("sleep", "30")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	defer sleep.Process.Kill()
	time.Sleep(50 * time.Millisecond)
	_, errOut, code := runTool(t, "-p", fmt.Sprint(sleep.Process.Pid))
	if code != 1 || !strings.Contains(string(errOut), "no CUDA library found") || !strings.Contains(string(errOut), "libcudart.so*") {
		t.Errorf("non-CUDA -p: exit %d, stderr %q", code, errOut)
	}
}

// A real nvcc-built program with static cudart (nvcc's default) on a machine
// without a GPU: its calls fail, and must be reported with the CUDA error
// name. Runs only where nvcc is installed and works.
func TestNvccStaticCudartFailures(t *testing.T) {
	build(t)
	nvcc := testenv.Lookup("nvcc")
	if nvcc == "" {
		t.Skip("nvcc not found")
	}
	if _, err := os.Stat("/dev/nvidiactl"); err == nil {
		t.Skip("a GPU is present: the calls would succeed; scripts/gpu/gpuevent_snoop-check.sh covers that")
	}
	src := filepath.Join(workDir, "nv.cu")
	os.WriteFile(src, []byte(`#include <cstdio>
__global__ void scale(float *x, float a, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= a; }
int main() {
  float *d = 0;
  cudaError_t e = cudaMalloc(&d, 1 << 20);
  printf("cudaMalloc: %s\n", cudaGetErrorName(e));
  scale<<<4, 256>>>(d, 2.0f, 1000);
  return 0;
}
`), 0o644)
	bin := filepath.Join(workDir, "nv")
	// Debian's usr/bin/nvcc is a wrapper that execs the real one at an
	// absolute path; an unpacked (not installed) toolkit has it beside.
	nvccs := []string{nvcc, filepath.Join(filepath.Dir(nvcc), "../lib/nvidia-cuda-toolkit/bin/nvcc")}
	var built bool
	for _, nv := range nvccs {
		for _, extra := range [][]string{nil, {"-ccbin", "clang-14"}} {
			if built {
				break
			}
			args := append(append([]string{}, extra...), "-o", bin, src)
			if out, err := exec.Command(nv, args...).CombinedOutput(); err == nil {
				built = true
			} else {
				t.Logf("%s %v: %v\n%s", nv, args, err, out)
			}
		}
	}
	if !built {
		t.Skip("nvcc is present but cannot build here")
	}
	out, errOut, code := runTool(t, "-j", "--", bin)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var malloc, launch record
	for _, r := range parseJSONLines(t, out) {
		switch r.str("api") {
		case "cudaMalloc":
			malloc = r
		case "cudaLaunchKernel":
			launch = r
		}
	}
	appSays := ""
	for _, l := range strings.Split(string(out), "\n") {
		if s, ok := strings.CutPrefix(l, "cudaMalloc: "); ok {
			appSays = s
		}
	}
	if malloc == nil || malloc.str("error") != appSays || malloc.num("ret") == 0 {
		t.Errorf("cudaMalloc event %v; the program itself got %q", malloc, appSays)
	}
	if launch == nil || launch.str("kernel") != "scale(float*, float, int)" || fmt.Sprint(launch["grid"]) != "[4 1 1]" {
		t.Errorf("launch event %v, want scale(float*, float, int) with grid [4 1 1]", launch)
	}
}

// No -p and no command: every process, including one that starts after the
// tool and maps a libcudart the tool found by its /proc rescan.
func TestTraceAll(t *testing.T) {
	build(t)
	tool, out, errr, line := startTool(t, nil, "-j", "-d", "4")
	if !strings.Contains(line, "in all processes") {
		t.Fatalf("start line %q", line)
	}
	app := exec.Command(filepath.Join(workDir, "app_shared"), "wait")
	stdin, _ := app.StdinPipe()
	if err := app.Start(); err != nil {
		t.Fatal(err)
	}
	defer app.Process.Kill()
	// Let the once-a-second rescan find the library the program maps.
	time.Sleep(2200 * time.Millisecond)
	stdin.Write([]byte("x"))
	stdin.Close()
	app.Wait()
	io.ReadAll(errr)
	if err := tool.Wait(); err != nil {
		t.Fatalf("tool: %v", err)
	}
	checkAppTrace(t, parseJSONLines(t, out.Bytes()), app.Process.Pid, "app_shared", false)
}

// A reader that falls behind must cost events, never block the program, and
// every lost event must be counted: shown + dropped == calls made.
func TestRingBufferDropsCounted(t *testing.T) {
	build(t)
	const calls = 100000
	tool := exec.Command(toolBin, "-j", "--ring-mb", "1", "--", "./app_static", "loop", fmt.Sprint(calls))
	tool.Dir = workDir
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	tool.Stdout, tool.Stderr = pw, &errb
	if err := tool.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	// Do not read for a while: the tool blocks on a full pipe, its 1 MiB
	// ring buffer (about 2500 events) fills, the BPF side drops.
	time.Sleep(3 * time.Second)
	out, _ := io.ReadAll(pr)
	if err := tool.Wait(); err != nil {
		t.Fatalf("tool: %v\n%s", err, errb.Bytes())
	}
	var launches int
	var acc record
	for _, r := range parseJSONLines(t, out) {
		switch r.str("type") {
		case "launch":
			launches++
		case "account":
			acc = r
		}
	}
	if acc == nil {
		t.Fatalf("no account line; stderr %s", errb.Bytes())
	}
	dropped := int(acc.num("dropped_ringbuf"))
	if launches+dropped != calls || int(acc.num("events")) != launches {
		t.Errorf("%d launches shown + %d dropped != %d calls (account %v)", launches, dropped, calls, acc)
	}
	if dropped == 0 {
		t.Errorf("no drops although the reader was stalled (account %v)", acc)
	}
	if !strings.Contains(errb.String(), fmt.Sprintf("%d dropped (ring buffer full", dropped)) {
		t.Errorf("stderr account lacks the drops: %s", errb.String())
	}
}

// Launches through kernel handles (nvcc 13's stubs, the driver API) are
// named from the lookups that returned the handles; the lookups themselves
// are not shown.
func TestKernelHandles(t *testing.T) {
	build(t)
	for _, app := range []string{"app_shared", "app_static"} {
		out, errOut, code := runTool(t, "-j", "--", "./"+app, "handles")
		if code != 0 {
			t.Fatalf("%s: exit %d\nstderr: %s", app, code, errOut)
		}
		var got []string
		for _, r := range parseJSONLines(t, out) {
			switch r.str("type") {
			case "launch":
				got = append(got, r.str("api")+":"+r.str("kernel"))
			case "malloc", "free", "memcpy", "memset", "graph":
				t.Errorf("%s: unexpected event %v", app, r)
			}
		}
		want := "[cudaLaunchKernel:scale(float*, int) cuLaunchKernel:scale(float*, int) cuLaunchKernel:void gemm::kernel<float>(float*)]"
		if fmt.Sprint(got) != want {
			t.Errorf("%s: launches %v, want %s\nstderr: %s", app, got, want, errOut)
		}
		if !bytes.Contains(errOut, []byte("3 events")) || !bytes.Contains(errOut, []byte("2 kernels named")) {
			t.Errorf("%s: account line: %s", app, errOut)
		}
	}
}
