package agentclient

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"testing"

	"github.com/gpubpf/gpubpf/internal/testenv"
	"github.com/gpubpf/gpubpf/pkg/runtime/agentproto"
)

// fakeSanitizer builds the stand-in libsanitizer-public.so
// (agent/testdata/fakesanitizer.c): the stand-in driver reports each launch
// to it as the real driver does to the sanitizer. (The sanitizer itself
// runs on the GPU machine: scripts/gpu/sanitizer-check.sh.)
func fakeSanitizer(t *testing.T, f fixture) string {
	t.Helper()
	_, self, _, _ := goruntime.Caller(0)
	src := filepath.Join(filepath.Dir(self), "..", "agent", "testdata", "fakesanitizer.c")
	lib := filepath.Join(f.dir, "libfakesan.so")
	if out, err := exec.Command(testenv.Tool(t, "gcc"), "-O1", "-fPIC", "-shared", "-pthread", "-o", lib, src).CombinedOutput(); err != nil {
		t.Fatalf("building the stand-in sanitizer: %v\n%s", err, out)
	}
	return lib
}

// sanLaunch launches vecAdd and returns what the stand-in sanitizer said
// of it: "index=N" when it ran patched, "unpatched" when not.
func sanLaunch(a *app) string {
	a.t.Helper()
	fmt.Fprintln(a.in, "kp")
	l := a.expect("SANRUN ")
	a.expect("LAUNCH ")
	a.expect("DONE")
	return strings.TrimPrefix(l, "SANRUN _Z6vecAddPfi ")
}

func account(t *testing.T, c *Conn) agentproto.SanitizeReply {
	t.Helper()
	r, err := c.Sanitize(&agentproto.SanitizeRequest{Flags: agentproto.SanitizeAccount})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// A preloaded agent told to by GPUBPF_SANITIZER subscribes, idle; a
// selection turns the launch callbacks on, and the first launch of a
// selected kernel patches its module, gives it an index from the pool and
// runs patched; the account counts it and says the index once; the end
// takes the patch out.
func TestSanitizeStandIn(t *testing.T) {
	f := build(t)
	lib := fakeSanitizer(t, f)
	log := filepath.Join(f.dir, "san.log")
	a, c := f.startDialed(t, "GPUBPF_SANITIZER="+lib, "FAKESAN_LOG="+log)
	if r := account(t, c); !r.Ready || r.Why != "" {
		t.Fatalf("account before a selection: %+v, want ready", r)
	}
	if got := sanLaunch(a); got != "unpatched" {
		t.Fatalf("before a selection the launch ran %q", got)
	}
	late := uint32(agentproto.SanitizeLateIndex)
	_, err := c.Sanitize(&agentproto.SanitizeRequest{Enter: "e_t", Exit: "x_t", Patch: []byte{0x7f, 'E', 'L', 'F'},
		Kernels: []agentproto.SanitizeKernel{{Name: "_Z6vecAddPfi", Index: late}, {Name: "_Z5otherPi", Index: late}},
		Pool:    []uint32{7, 9}})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if got := sanLaunch(a); got != "index=7" {
			t.Fatalf("launch %d after the selection ran %q, want patched with index 7 (the pool's first)", i, got)
		}
	}
	r := account(t, c)
	want := agentproto.SanitizeReply{Ready: true, Launches: 2, Threads: 64, Patched: 1, Selected: 2, PoolLeft: 1,
		Assigned: []agentproto.SanitizeKernel{{Name: "_Z6vecAddPfi", Index: 7}}}
	if fmt.Sprint(r) != fmt.Sprint(want) {
		t.Errorf("account: %+v\nwant %+v", r, want)
	}
	if r := account(t, c); len(r.Assigned) != 0 {
		t.Errorf("an index said twice: %+v", r.Assigned)
	}
	if _, err := c.Sanitize(&agentproto.SanitizeRequest{Flags: agentproto.SanitizeEnd}); err != nil {
		t.Fatal(err)
	}
	if got := sanLaunch(a); got != "unpatched" {
		t.Errorf("after the end the launch ran %q", got)
	}
	b, _ := os.ReadFile(log)
	wantLog := "subscribe\ndomain 5 1\nadd 127\ninstr e_t 1\ninstr x_t 2\npatch\ndomain 5 0\nunpatch\n"
	if string(b) != wantLog {
		t.Errorf("sanitizer calls:\n%s\nwant:\n%s", b, wantLog)
	}
}

// Where the agent cannot patch, the account says why and a selection is
// refused with the same words; a patch module the sanitizer refuses lets
// the launches run unpatched, counted, with the reason.
func TestSanitizeRefused(t *testing.T) {
	f := build(t)
	lib := fakeSanitizer(t, f)
	for _, tc := range []struct {
		name string
		env  []string
		want string
	}{
		{"not asked for", nil, "not started with GPUBPF_SANITIZER=on"},
		{"off", []string{"GPUBPF_SANITIZER=off"}, "GPUBPF_SANITIZER=off in the program's environment"},
		{"missing", []string{"GPUBPF_SANITIZER=/nonexistent/libsanitizer-public.so"}, "libsanitizer-public.so not found (/nonexistent/libsanitizer-public.so)"},
		{"not a sanitizer", []string{"GPUBPF_SANITIZER=" + f.agent}, "lacks the patching API"},
		{"slot taken", []string{"GPUBPF_SANITIZER=" + lib, "FAKESAN_BUSY=1"}, "holds the tools slot"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, c := f.startDialed(t, tc.env...)
			r := account(t, c)
			if r.Ready || !strings.Contains(r.Why, tc.want) {
				t.Errorf("account: ready %v, why %q; want not ready saying %q", r.Ready, r.Why, tc.want)
			}
			_, err := c.Sanitize(&agentproto.SanitizeRequest{Patch: []byte{1}, Kernels: []agentproto.SanitizeKernel{{Name: "_Z6vecAddPfi"}}})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("selection: %v, want refused saying %q", err, tc.want)
			}
		})
	}
	t.Run("patch module refused", func(t *testing.T) {
		a, c := f.startDialed(t, "GPUBPF_SANITIZER="+lib, "FAKESAN_REFUSE=1")
		if _, err := c.Sanitize(&agentproto.SanitizeRequest{Exit: "x", Patch: []byte{1},
			Kernels: []agentproto.SanitizeKernel{{Name: "_Z6vecAddPfi", Index: 3}}}); err != nil {
			t.Fatal(err)
		}
		if got := sanLaunch(a); got != "unpatched" {
			t.Fatalf("the launch ran %q", got)
		}
		r := account(t, c)
		if r.Launches != 0 || r.Refused != 1 || r.Failures != 1 || !strings.Contains(r.LastFailure, "sanitizerAddPatches") {
			t.Errorf("account %+v: want 1 launch unpatched, the failure said", r)
		}
	})
}

// The end's reply counts every patched launch and names the indexes given
// since the last account: nothing runs patched after it, and no kernel's
// name is lost with the selection.
func TestSanitizeEndAccount(t *testing.T) {
	f := build(t)
	lib := fakeSanitizer(t, f)
	a, c := f.startDialed(t, "GPUBPF_SANITIZER="+lib)
	if _, err := c.Sanitize(&agentproto.SanitizeRequest{Exit: "x", Patch: []byte{1}, Pool: []uint32{4},
		Kernels: []agentproto.SanitizeKernel{{Name: "_Z6vecAddPfi", Index: agentproto.SanitizeLateIndex}}}); err != nil {
		t.Fatal(err)
	}
	if got := sanLaunch(a); got != "index=4" {
		t.Fatalf("the launch ran %q", got)
	}
	r, err := c.Sanitize(&agentproto.SanitizeRequest{Flags: agentproto.SanitizeEnd})
	if err != nil {
		t.Fatal(err)
	}
	if r.Launches != 1 || r.Threads != 32 || len(r.Assigned) != 1 || r.Assigned[0] != (agentproto.SanitizeKernel{Name: "_Z6vecAddPfi", Index: 4}) {
		t.Errorf("end's reply %+v: want 1 launch of 32 threads and vecAdd's index 4", r)
	}
	if got := sanLaunch(a); got != "unpatched" {
		t.Errorf("after the end the launch ran %q", got)
	}
	if r := account(t, c); len(r.Assigned) != 0 || r.Launches != 1 {
		t.Errorf("after the end: %+v", r)
	}
}
