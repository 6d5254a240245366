package launchlate

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"testing"

	collpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	"google.golang.org/protobuf/proto"

	"github.com/gpubpf/gpubpf/internal/testenv"
)

// sassPTX is a kernel the stand-in app launches, assembled to SASS (a
// cubin) and packed without its PTX: like PyTorch's kernels, nothing for a
// probe.
const sassPTX = `.version 7.8
.target sm_90
.address_size 64

.visible .entry _Z6vecAddPfi(
	.param .u64 _Z6vecAddPfi_param_0,
	.param .u32 _Z6vecAddPfi_param_1
)
{
	ret;
}
`

// launchlate on a kernel without PTX, through the stand-in driver and a
// stand-in libcupti: every launch timed from CUPTI's records, its run time
// too, the last ones taken as the program exits, and no "no kernel
// matched" for a trace that timed every kernel.
// cuptiRig is a temporary directory with the stand-in driver and app, a
// stand-in libcupti, the tool next to the agent and sassPTX (k.ptx); run
// runs a build step.
type cuptiRig struct {
	dir, cudaDir, cupti, tool, ptx string
	fatbinary                      string
	run                            func(name string, args ...string)
}

// newCUPTIRig builds a cuptiRig (root, ptxas and fatbinary needed).
func newCUPTIRig(t *testing.T) cuptiRig {
	t.Helper()
	testenv.Root(t)
	testenv.Ptxas(t)
	r := cuptiRig{dir: t.TempDir(), fatbinary: testenv.Tool(t, "fatbinary")}
	gcc := testenv.Tool(t, "gcc")
	r.cudaDir = testenv.BuildStandIn(t, r.dir).CUDADir
	r.run = func(name string, args ...string) {
		t.Helper()
		if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
	}
	r.ptx = filepath.Join(r.dir, "k.ptx")
	os.WriteFile(r.ptx, []byte(sassPTX), 0o644)
	_, self, _, _ := goruntime.Caller(0)
	r.cupti = filepath.Join(r.dir, "libfakecupti.so")
	r.run(gcc, "-O1", "-fPIC", "-shared", "-pthread", "-o", r.cupti,
		filepath.Join(filepath.Dir(self), "..", "..", "pkg", "runtime", "agent", "testdata", "fakecupti.c"))
	// the one binary, linked under the tool's name as make installs it,
	// next to libgpubpf-agent.so
	r.tool = filepath.Join(r.dir, "launchlate")
	r.run("go", "build", "-o", filepath.Join(r.dir, "gpubpf"), "../gpubpf")
	r.run("ln", "-s", "gpubpf", r.tool)
	return r
}

func TestKernelsWithoutPTX(t *testing.T) {
	r := newCUPTIRig(t)
	dir, cudaDir, cupti, tool, run, ptx, fatbinary := r.dir, r.cudaDir, r.cupti, r.tool, r.run, r.ptx, r.fatbinary
	cubin, fb := filepath.Join(dir, "k.cubin"), filepath.Join(dir, "k.fatbin")
	run(testenv.Ptxas(t), "-arch=sm_90", "-o", cubin, ptx)
	run(fatbinary, "-64", "--create="+fb, "--image=profile=sm_90,file="+cubin)

	// An OpenTelemetry collector's OTLP/HTTP endpoint: what the tool pushes.
	pushed := make(chan *collpb.ExportMetricsServiceRequest, 16)
	otlp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		req := &collpb.ExportMetricsServiceRequest{}
		if proto.Unmarshal(b, req) == nil {
			pushed <- req
		}
		out, _ := proto.Marshal(&collpb.ExportMetricsServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	}))
	defer otlp.Close()
	launchlate := func(fatbin, log string) (stdout, stderr bytes.Buffer) {
		t.Helper()
		cmd := exec.Command(tool, "-j", "--otlp", otlp.URL, "--", filepath.Join(dir, "app"))
		cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+cudaDir, "GPUBPF_TEST_FATBIN="+fatbin, "GPUBPF_CUPTI="+cupti,
			"FAKECUPTI_LOG="+log, "GPUBPF_AGENT_SOCKET_DIR="+filepath.Join(dir, "sock"))
		cmd.Stdin = strings.NewReader("launch\nlaunch\nlaunchp\nquit\n")
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("launchlate: %v\n%s\n%s", err, stdout.String(), stderr.String())
		}
		return stdout, stderr
	}
	// Kernels that all have PTX: CUPTI stays out of the process.
	withPTX := filepath.Join(dir, "ptx.fatbin")
	run(fatbinary, "-64", "--create="+withPTX, "--image=profile=compute_90,file="+ptx)
	ptxLog := filepath.Join(dir, "ptx.cupti.log")
	if out, _ := launchlate(withPTX, ptxLog); !strings.Contains(out.String(), `"cupti_records":0,`) {
		t.Errorf("kernels with PTX: %s", out.String())
	}
	if b, err := os.ReadFile(ptxLog); err == nil {
		t.Errorf("CUPTI was turned on for kernels that all have probes:\n%s", b)
	}

	stdout, _ := launchlate(fb, filepath.Join(dir, "sass.cupti.log"))
	if n := strings.Count(stdout.String(), "LAUNCH _Z6vecAddPfi"); n != 3 {
		t.Fatalf("the application launched %d times, want 3:\n%s", n, stdout.String())
	}
	var row, sum map[string]any
	for _, l := range strings.Split(stdout.String(), "\n") {
		var o map[string]any
		if json.Unmarshal([]byte(l), &o) != nil {
			continue
		}
		switch {
		case o["type"] == "kernel" && o["mangled"] == "_Z6vecAddPfi":
			row = o
		case o["type"] == "summary":
			sum = o
		}
	}
	if row == nil || row["launches"] != 3.0 || row["cupti"] != 3.0 || row["dur_launches"] != 3.0 || row["untimed"] != 0.0 {
		t.Errorf("kernel row %v: want 3 launches timed through CUPTI, 3 run times", row)
	}
	if sum == nil || sum["cupti_timed"] != 3.0 || sum["cupti_untimed"] != 0.0 || sum["cupti_records"] != 3.0 {
		t.Errorf("summary %v: want 3 timed through CUPTI", sum)
	}
	if acc, _ := sum["cupti_account"].(map[string]any); len(acc) != 1 {
		t.Errorf("summary's cupti_account %v: want the process's", sum["cupti_account"])
	} else {
		for _, v := range acc {
			if s, _ := v.(string); !strings.Contains(s, "launches stamped by CUPTI's callback") {
				t.Errorf("cupti_account %q: want launches stamped by CUPTI's callback", s)
			}
		}
	}
	// --otlp: the last push, at the end, has the table's 3 launches of the
	// kernel (the run with PTX pushed too: take the last push).
	var last *collpb.ExportMetricsServiceRequest
	for len(pushed) > 0 {
		last = <-pushed
	}
	counts := map[string]uint64{}
	for _, rm := range last.GetResourceMetrics() {
		for _, sm := range rm.GetScopeMetrics() {
			for _, m := range sm.GetMetrics() {
				for _, dp := range m.GetExponentialHistogram().GetDataPoints() {
					counts[m.GetName()] += dp.GetCount()
				}
			}
		}
	}
	if counts["gpubpf_launchlate_latency_seconds"] != 3 || counts["gpubpf_launchlate_duration_seconds"] != 3 {
		t.Errorf("pushed over OTLP: %v, want 3 latencies and 3 run times", counts)
	}
}

// A CUDA graph whose nodes the agent does not know (made before it came,
// or here: snapshots off) is timed through CUPTI: its first launch brings
// CUPTI on in a process whose kernels all have PTX, and the account says
// why its nodes were not instrumented.
func TestUnknownGraphBringsCUPTI(t *testing.T) {
	r := newCUPTIRig(t)
	dir, cudaDir, cupti, tool := r.dir, r.cudaDir, r.cupti, r.tool
	fb := filepath.Join(dir, "ptx.fatbin")
	r.run(r.fatbinary, "-64", "--create="+fb, "--image=profile=compute_90,file="+r.ptx)
	log := filepath.Join(dir, "cupti.log")
	cmd := exec.Command(tool, "-j", "--", filepath.Join(dir, "app"))
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+cudaDir, "GPUBPF_TEST_FATBIN="+fb, "GPUBPF_CUPTI="+cupti,
		"FAKECUPTI_LOG="+log, "GPUBPF_AGENT_SOCKET_DIR="+filepath.Join(dir, "sock"), "GPUBPF_AGENT_GRAPH_SNAPSHOTS=0")
	cmd.Stdin = strings.NewReader("gmade\nglast\nnap 500\nglast\nquit\n")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("launchlate: %v\n%s\n%s", err, stdout.String(), stderr.String())
	}
	if _, err := os.ReadFile(log); err != nil {
		t.Errorf("CUPTI was not turned on for a graph whose nodes no probe reaches:\n%s\n%s", stdout.String(), stderr.String())
	}
	var graphs map[string]any
	for _, l := range strings.Split(stdout.String(), "\n") {
		var o map[string]any
		if json.Unmarshal([]byte(l), &o) == nil && o["type"] == "graphs" {
			graphs = o
		}
	}
	ni, _ := graphs["not_instrumented"].([]any)
	if graphs == nil || graphs["launches"] != 2.0 || graphs["launches_unknown"] != 2.0 || len(ni) != 1 ||
		!strings.Contains(ni[0].(map[string]any)["why"].(string), "keeps no copy of its graph") {
		t.Errorf("graphs line %v:\n%s", graphs, stdout.String())
	}
}
