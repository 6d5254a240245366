package sanpatch

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpubpf/gpubpf/pkg/runtime/agentproto"
	"github.com/gpubpf/gpubpf/pkg/runtime/jit"
)

// fakeAgent records the requests and answers like the agent's op 29,
// with its pool of kernel indexes.
type fakeAgent struct {
	ready    bool
	why      string
	refuse   *agentproto.Error
	reqs     []agentproto.SanitizeRequest
	pool     []uint32
	assigned []agentproto.SanitizeKernel
}

func (a *fakeAgent) Sanitize(r *agentproto.SanitizeRequest) (agentproto.SanitizeReply, error) {
	a.reqs = append(a.reqs, *r)
	if r.Flags&agentproto.SanitizeAccount == 0 && a.refuse != nil {
		return agentproto.SanitizeReply{}, a.refuse
	}
	if r.Flags&agentproto.SanitizeAccount == 0 {
		a.pool = append(a.pool, r.Pool...)
	}
	rep := agentproto.SanitizeReply{Ready: a.ready, Why: a.why, PoolLeft: uint32(len(a.pool)), Assigned: a.assigned}
	a.assigned = nil
	return rep, nil
}

// launch gives kernel its index from the pool, as its first launch does.
func (a *fakeAgent) launch(kernel string) {
	a.assigned = append(a.assigned, agentproto.SanitizeKernel{Name: kernel, Index: a.pool[0]})
	a.pool = a.pool[1:]
}

// fakeIndexes is the session's kernel index table.
type fakeIndexes struct{ names []string }

func (x *fakeIndexes) ReserveKernelIndexes(n int) []uint32 {
	var out []uint32
	for range n {
		out = append(out, uint32(len(x.names)))
		x.names = append(x.names, "")
	}
	return out
}

func (x *fakeIndexes) NameKernelIndex(i uint32, k string) { x.names[i] = k }

// selections are the requests that selected kernels (not account reads).
func (a *fakeAgent) selections() []agentproto.SanitizeRequest {
	var out []agentproto.SanitizeRequest
	for _, r := range a.reqs {
		if r.Flags&agentproto.SanitizeAccount == 0 {
			out = append(out, r)
		}
	}
	return out
}

func TestPathSelect(t *testing.T) {
	// A fake ptxas that copies its input PTX to the output: the "cubin"
	// then shows what was assembled.
	dir := t.TempDir()
	writePtxas(t, dir, "release 13.0", `eval in=\${$#}; while [ $# -gt 0 ]; do [ "$1" = -o ] && out=$2; shift; done; cp "$in" "$out"`)
	t.Setenv("GPUBPF_PTXAS", filepath.Join(dir, "ptxas"))
	th := compileProg(t, threadhist, "threadhist_exit")
	builds := 0
	build := func() (Program, error) {
		builds++
		return Program{Exit: []*jit.Function{th}, Arch: "sm_90", Target: agentproto.Target{Device: 1}}, nil
	}
	k := func(names ...string) []string { return names }

	t.Run("ready", func(t *testing.T) {
		a := &fakeAgent{ready: true}
		idx := &fakeIndexes{names: []string{"ptxKernel"}}
		p := NewPath(a, idx, "t1")
		if err := p.Select("set1", k("a", "b"), build); err != nil {
			t.Fatal(err)
		}
		if err := p.Select("set1", k("b", "c"), build); err != nil {
			t.Fatal(err)
		}
		if err := p.Select("set1", k("c"), build); err != nil {
			t.Fatal(err)
		}
		sel := a.selections()
		if len(sel) != 2 {
			t.Fatalf("%d selections, want 2 (the third selects nothing new)", len(sel))
		}
		first, second := sel[0], sel[1]
		if len(first.Patch) == 0 || first.Exit != ExitFunc+"_t1" || first.Enter != EnterFunc+"_t1" {
			t.Fatalf("first request: patch %d bytes, enter %q exit %q", len(first.Patch), first.Enter, first.Exit)
		}
		if !strings.Contains(string(first.Patch), ".visible .func (.param .b32 gpubpf_res) "+ExitFunc+"_t1(") {
			t.Errorf("the patch module's callbacks are not renamed with the tag")
		}
		if first.Target.Device != 1 || len(first.Kernels) != 2 {
			t.Errorf("first request: target %+v, kernels %v", first.Target, first.Kernels)
		}
		if len(second.Patch) != 0 || len(second.Kernels) != 1 || second.Kernels[0].Name != "c" {
			t.Errorf("second request: patch %d bytes, kernels %v: want no patch and c alone", len(second.Patch), second.Kernels)
		}
		if !p.Used() {
			t.Error("Used is false after selections")
		}
		for _, k := range first.Kernels {
			if k.Index != agentproto.SanitizeLateIndex {
				t.Errorf("kernel %s sent with index %d: indexes are given at the first launch", k.Name, k.Index)
			}
		}
		if len(first.Pool) != poolChunk || first.Pool[0] != 1 || len(second.Pool) != 0 {
			t.Errorf("pool: first request %v, second %v: want %d indexes from 1, then none", first.Pool, second.Pool, poolChunk)
		}
		// b and c run: the account names their indexes; the pool, below
		// poolLow after enough launches, is topped up.
		a.launch("c")
		a.launch("b")
		if _, err := p.Account(); err != nil {
			t.Fatal(err)
		}
		if idx.names[1] != "c" || idx.names[2] != "b" {
			t.Errorf("index names %q: want c at 1, b at 2", idx.names[:3])
		}
		for _, n := range []string{"d", "e", "f", "g", "h", "i", "j"} {
			a.launch(n)
		}
		n0 := len(idx.names)
		if _, err := p.Account(); err != nil {
			t.Fatal(err)
		}
		if len(idx.names) != n0+poolChunk || len(a.pool) != 7+poolChunk {
			t.Errorf("after 9 of %d indexes given: %d reserved, agent pool %d; want a top-up of %d", poolChunk, len(idx.names)-n0, len(a.pool), poolChunk)
		}
		if err := p.Select("set2", k("d"), build); !errors.Is(err, ErrOtherPrograms) {
			t.Errorf("another program set: %v, want ErrOtherPrograms", err)
		}
		other := func() (Program, error) {
			return Program{Exit: []*jit.Function{th}, Arch: "sm_90", Target: agentproto.Target{Device: 2}}, nil
		}
		if err := p.Select("set1", k("e"), other); err == nil || !strings.Contains(err.Error(), "one GPU per process") {
			t.Errorf("another device: %v, want refused", err)
		}
		if err := p.Select("set1", k("f"), build); err != nil {
			t.Errorf("the first device after another's refusal: %v", err)
		}
	})

	t.Run("not ready", func(t *testing.T) {
		a := &fakeAgent{why: "GPUBPF_SANITIZER=off in the program's environment"}
		p := NewPath(a, &fakeIndexes{}, "t2")
		err := p.Select("set1", k("a"), build)
		if err == nil || !strings.Contains(err.Error(), "GPUBPF_SANITIZER=off") {
			t.Fatalf("err = %v, want the agent's reason", err)
		}
		if err2 := p.Select("set1", k("b"), build); err2 == nil || err2.Error() != err.Error() {
			t.Errorf("second select: %v, want the same refusal", err2)
		}
		if len(a.selections()) != 0 || p.Used() {
			t.Errorf("%d selections sent to an agent that cannot patch", len(a.selections()))
		}
	})

	t.Run("refused", func(t *testing.T) {
		a := &fakeAgent{ready: true, refuse: &agentproto.Error{Op: agentproto.OpSanitize, Status: agentproto.StatusUnsupported,
			Message: "another gpubpf tool attached to this process holds the sanitizer path: end it first"}}
		p := NewPath(a, &fakeIndexes{}, "t3")
		err := p.Select("set1", k("a"), build)
		if err == nil || !strings.Contains(err.Error(), "another gpubpf tool") {
			t.Fatalf("err = %v", err)
		}
		if p.Select("set1", k("b"), build) == nil || len(a.selections()) != 1 {
			t.Errorf("a refusal must rule the path out for the process (%d selections)", len(a.selections()))
		}
	})

	t.Run("no ptxas", func(t *testing.T) {
		t.Setenv("GPUBPF_PTXAS", filepath.Join(t.TempDir(), "missing"))
		a := &fakeAgent{ready: true}
		p := NewPath(a, &fakeIndexes{}, "t4")
		err := p.Select("set1", k("a"), build)
		if err == nil || !strings.Contains(err.Error(), "ptxas") {
			t.Fatalf("err = %v, want one about ptxas", err)
		}
		if len(a.selections()) != 0 {
			t.Error("selected kernels without a patch module")
		}
	})
	if builds == 0 {
		t.Error("build never called")
	}
}
