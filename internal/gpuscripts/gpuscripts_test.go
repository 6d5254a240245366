// Package gpuscripts checks, on machines without a GPU, what can be checked
// of the scripts the GPU machine runs (scripts/gpu-check.sh and
// scripts/gpu/*): that they parse, that the fault suite passes shellcheck,
// and the fault suite's own process handling (faults-check.sh --selftest),
// so that its first run on the GPU machine is not spent on shell mistakes.
package gpuscripts

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpubpf/gpubpf/internal/testenv"
)

const root = "../.."

func TestScriptsParse(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(root, "scripts", "*.sh"))
	more, _ := filepath.Glob(filepath.Join(root, "scripts", "gpu", "*.sh"))
	files = append(append(files, more...), filepath.Join(root, "samples", "check.sh"))
	if len(files) < 5 {
		t.Fatalf("found only %d scripts", len(files))
	}
	for _, f := range files {
		if out, err := exec.Command("bash", "-n", f).CombinedOutput(); err != nil {
			t.Errorf("bash -n %s: %v\n%s", f, err, out)
		}
	}
}

func TestFaultsShellcheck(t *testing.T) {
	sc := testenv.Lookup("shellcheck")
	if sc == "" {
		t.Skip("shellcheck not installed")
	}
	for _, name := range []string{"faults-check.sh", "memtrace-check.sh"} {
		f := filepath.Join(root, "scripts", "gpu", name)
		if out, err := exec.Command(sc, "-S", "warning", f).CombinedOutput(); err != nil {
			t.Errorf("shellcheck %s: %v\n%s", f, err, out)
		}
	}
}

// TestMemtraceSelftest: the memory-access check derives its expected
// counts from the kernel's PTX by the memory pass's rules; its counter
// agrees with the Go tests on the committed fixtures.
func TestMemtraceSelftest(t *testing.T) {
	if testenv.Lookup("python3") == "" {
		if testenv.InCI() {
			t.Fatal("python3 not found: memtrace-check.sh --selftest needs it")
		}
		t.Skip("python3 not found")
	}
	out, err := exec.Command("bash", filepath.Join(root, "scripts", "gpu", "memtrace-check.sh"), "--selftest").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "selftest: ok") {
		t.Fatalf("memtrace-check.sh --selftest: %v\n%s", err, out)
	}
}

func TestFaultsSelftest(t *testing.T) {
	if testenv.Lookup("python3") == "" {
		if testenv.InCI() {
			t.Fatal("python3 not found: faults-check.sh --selftest needs it")
		}
		t.Skip("python3 not found")
	}
	out, err := exec.Command("bash", filepath.Join(root, "scripts", "gpu", "faults-check.sh"), "--selftest").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "selftest: ok") {
		t.Fatalf("faults-check.sh --selftest: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

func TestPythonHelpersParse(t *testing.T) {
	py := testenv.Lookup("python3")
	if py == "" {
		t.Skip("python3 not found")
	}
	for _, f := range []string{"agent_fuzz.py", "faults_util.py", "memtrace_util.py"} {
		parse := "import ast, sys; ast.parse(open(sys.argv[1]).read(), sys.argv[1])" // no __pycache__ left behind
		if out, err := exec.Command(py, "-c", parse, filepath.Join(root, "scripts", "gpu", f)).CombinedOutput(); err != nil {
			t.Errorf("%s: %v\n%s", f, err, out)
		}
	}
}
