package agentclient

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpubpf/gpubpf/pkg/runtime/agentproto"
)

// graphRun is what one graph launch ran on the stand-in driver: each kernel
// node's function and its arguments, in order, and whether the agent
// updated the exec first (and how the driver answered).
type graphRun struct {
	nodes  []string
	args   []map[int]uint64
	update string // "", "ok", "refused", "topology"
}

func (a *app) graphRun(exec string) graphRun {
	a.t.Helper()
	return a.graphRunCmd("gl " + exec)
}

// graphRunCmd is graphRun for any of the app's graph launch commands
// ("glc EXEC": into the capturing stream).
func (a *app) graphRunCmd(cmd string) graphRun {
	a.t.Helper()
	var r graphRun
	for _, l := range a.output(cmd) {
		f := strings.Fields(l)
		switch {
		case len(f) == 3 && f[0] == "GRAPHRUN":
			r.nodes = append(r.nodes, f[2])
			r.args = append(r.args, map[int]uint64{})
		case len(f) == 3 && f[0] == "ARG" && len(r.args) > 0:
			var i int
			var v uint64
			fmt.Sscan(f[1], &i)
			fmt.Sscan(f[2], &v)
			r.args[len(r.args)-1][i] = v
		case len(f) == 3 && f[0] == "EXECUPDATE":
			r.update = f[2]
		case len(f) == 2 && f[0] == "GRAPHLAUNCHED" && f[1] != "0":
			a.t.Fatalf("%s: the graph launch returned %s", cmd, f[1])
		}
	}
	return r
}

// madeGraph has the app make a graph of n vecAdd kernel nodes, instantiate
// it, and destroy the graph (as PyTorch does): only the exec is left.
func (a *app) madeGraph(n int) string {
	a.t.Helper()
	g := strings.Fields(a.output("mkgraph")[0])
	if len(g) != 3 || g[0] != "GRAPH" || g[1] != "0" {
		a.t.Fatalf("mkgraph: %v", g)
	}
	for i := 0; i < n; i++ {
		a.output("gn " + g[2])
	}
	x := ""
	for _, l := range a.output("inst " + g[2]) {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "EXEC" && f[1] == "0" {
			x = f[2]
		}
	}
	if x == "" {
		a.t.Fatal("inst: no exec")
	}
	a.output("gdestroy " + g[2])
	return x
}

func graphOf(t *testing.T, c *Conn, exec string) agentproto.GraphExec {
	t.Helper()
	execs, err := c.Graphs()
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range execs {
		if fmt.Sprintf("%#x", x.Exec) == exec {
			return x
		}
	}
	t.Fatalf("graphs: no exec %s in %+v", exec, execs)
	return agentproto.GraphExec{}
}

func wantRun(t *testing.T, what string, r graphRun, fn string, n int) {
	t.Helper()
	if len(r.nodes) != n {
		t.Fatalf("%s: ran %v, want %d nodes of %s", what, r.nodes, n, fn)
	}
	for i, got := range r.nodes {
		if got != fn {
			t.Fatalf("%s: node %d ran %s, want %s (all: %v)", what, i, got, fn, r.nodes)
		}
	}
}

const graphProbe = ".visible .entry probe_g (.param .u64 a, .param .u32 n)\n{\n}\n"

// An exec instantiated before the tool came (its graph destroyed since) runs
// the instrumented clone in every kernel node from the first launch after
// the activation, with the application's arguments; a deactivate, and the
// tool's death, put the original nodes back at the next launch; the agent
// counts launches and kernel-node runs from the tool's hello.
func TestGraphMadeBeforeAttach(t *testing.T) {
	f := build(t)
	a := f.start(t)
	x := a.madeGraph(2)
	wantRun(t, "before any tool", a.graphRun(x), "_Z6vecAddPfi", 2)

	c, err := Dial(a.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if g := graphOf(t, c, x); g.Launches != 0 {
		t.Fatalf("launches before the tool came were counted: %+v", g)
	}
	r := a.graphRun(x)
	wantRun(t, "attached, no probe", r, "_Z6vecAddPfi", 2)
	if r.update != "" {
		t.Fatalf("an exec with no probe for its kernels was updated (%s)", r.update)
	}
	k, lr := loadVecAddProbe(t, c, graphProbe, "probe_g")
	if err := c.Activate(k.Handle, lr.CloneID, lr.Functions[0].Handle); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		r = a.graphRun(x)
		wantRun(t, "probe active", r, "probe_g", 2)
		if (i == 0) != (r.update == "ok") {
			t.Fatalf("launch %d: update %q (want one update, at the first launch)", i, r.update)
		}
		for _, args := range r.args {
			if args[0] != 0x1234 || args[1] != 77 {
				t.Fatalf("the clone got arguments %v, want the application's (0x1234, 77)", args)
			}
		}
	}
	g := graphOf(t, c, x)
	want := agentproto.GraphExec{Exec: g.Exec, Launches: 4, LaunchesInstrumented: 3, KernelRuns: 8, KernelRunsInstrumented: 6,
		KernelNodes: 2, InstrumentedNodes: 2, State: agentproto.GraphSwapped, Why: agentproto.GraphInstrumented, WhyText: g.WhyText}
	if g != want {
		t.Fatalf("graphs: %+v, want %+v", g, want)
	}

	if _, err := c.Deactivate(k.Handle); err != nil {
		t.Fatal(err)
	}
	r = a.graphRun(x)
	wantRun(t, "after deactivate", r, "_Z6vecAddPfi", 2)
	if r.update != "ok" {
		t.Fatalf("restore: update %q", r.update)
	}
	for _, args := range r.args {
		if len(args) != 0 {
			t.Fatalf("restored nodes: arguments %v (the original's are not printed)", args)
		}
	}

	// activated again, then the tool dies: the originals come back
	lr, err = c.LoadPTX(OnDevice(0), []byte(graphProbe), "probe_g")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Activate(k.Handle, lr.CloneID, lr.Functions[0].Handle); err != nil {
		t.Fatal(err)
	}
	wantRun(t, "activated again", a.graphRun(x), "probe_g", 2)
	c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		r = a.graphRun(x)
		if r.nodes[0] == "_Z6vecAddPfi" || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	wantRun(t, "after the tool went", r, "_Z6vecAddPfi", 2)
	if r.update != "ok" {
		t.Fatalf("restore after the tool went: update %q", r.update)
	}
	if r = a.graphRun(x); r.update != "" {
		t.Fatalf("a launch with no tool updated the exec (%s)", r.update)
	}
	a.output("xdestroy " + x)
}

// The driver refuses the update: the graph runs its original nodes and
// the account says why; an exec the application changes in place is left
// alone; one the agent keeps no copy of (snapshots off) is counted, and
// every tool told (pkg/inject's late test has one made before the agent).
func TestGraphRefusedAndUnknown(t *testing.T) {
	f := build(t)
	a := f.start(t, "FAKECUDA_GRAPH_UPDATE=refuse")
	x := a.madeGraph(1)
	changed := a.madeGraph(1)
	a.output("xmemset " + changed)
	c, err := Dial(a.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	k, lr := loadVecAddProbe(t, c, graphProbe, "probe_g")
	if err := c.Activate(k.Handle, lr.CloneID, lr.Functions[0].Handle); err != nil {
		t.Fatal(err)
	}
	r := a.graphRun(x)
	wantRun(t, "update refused", r, "_Z6vecAddPfi", 1)
	if r.update != "refused" {
		t.Fatalf("update %q", r.update)
	}
	g := graphOf(t, c, x)
	if g.Why != agentproto.GraphRefused || g.CUResult != 910 || g.LaunchesInstrumented != 0 || g.Launches != 1 ||
		!strings.Contains(g.Detail, "not support") || g.WhyText == "" {
		t.Fatalf("refused: %+v", g)
	}
	r = a.graphRun(changed)
	wantRun(t, "changed in place", r, "_Z6vecAddPfi", 1)
	if r.update != "" {
		t.Fatalf("an exec the application changed in place was updated (%s)", r.update)
	}
	if g := graphOf(t, c, changed); g.Why != agentproto.GraphChangedInPlace || g.Detail != "cuGraphExecMemsetNodeSetParams" {
		t.Fatalf("changed in place: %+v", g)
	}

	b := f.start(t, "GPUBPF_AGENT_GRAPH_SNAPSHOTS=0")
	u := b.madeGraph(2)
	cb, err := Dial(b.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Close()
	wantRun(t, "unknown exec", b.graphRun(u), "_Z6vecAddPfi", 2)
	waitGraphsNote(t, cb, "for an exec the agent never saw made")
	b.graphRun(u)
	if g := graphOf(t, cb, u); g.Why != agentproto.GraphNoSnapshot || g.KernelNodes != agentproto.GraphNodesUnknown ||
		g.Launches != 2 || !strings.Contains(g.WhyText, "GPUBPF_AGENT_GRAPH_SNAPSHOTS=0") {
		t.Fatalf("unknown exec: %+v", g)
	}
	// the next tool hears of it too (launchlate after threadhist)
	cb.Close()
	cb2, err := Dial(b.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	defer cb2.Close()
	b.graphRun(u)
	waitGraphsNote(t, cb2, "for a second tool")
}

// waitGraphsNote waits for c's graphs notification (other notifications
// may come first).
func waitGraphsNote(t *testing.T, c *Conn, what string) {
	t.Helper()
	for noted := false; !noted; {
		select {
		case n := <-c.Notifications():
			noted = n.Graphs
		case <-time.After(5 * time.Second):
			t.Fatal("no graphs notification " + what)
		}
	}
}

// A tool with launch words (launchlate) gets no stamp word per exec the
// agent swaps: each swapped kernel node takes an id of the tool's, and the
// agent keeps the exec's launch stamps by number (run k of a node is the
// exec's launch base + k). A launch the driver refuses gives its number
// back; a launch into a capture puts the originals back first (the
// captured copy would count runs that are not the exec's launches), and the
// next launch swaps again with new ids; a deactivate ends the ids' epoch.
func TestGraphLaunchNumbers(t *testing.T) {
	f := build(t)
	a := f.start(t, "FAKECUDA_GRAPH_LAUNCH_FAIL=3")
	x := a.madeGraph(2)
	c, err := Dial(a.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	k, lr := loadVecAddProbe(t, c, ".visible .entry probe_lw (.param .u64 a, .param .u32 n, .param .u64 h0, .param .u64 h1)\n{\n}\n", "probe_lw")
	mf := newMemfd(t, 4096)
	reg, err := c.RegisterMemfd(OnDevice(0), mf, 4096, 0)
	if err != nil {
		t.Fatal(err)
	}
	lw := agentproto.LaunchWords{Hidden: agentproto.LaunchHiddenWords, Params: 2, BufOffset: 16,
		Region: reg.RegionID, Offset: 256, Slots: 64}
	if err := c.ActivateWith(k.Handle, lr.CloneID, lr.Functions[0].Handle, lw); err != nil {
		t.Fatal(err)
	}
	// nodeIDs checks a launch ran the clone in both nodes with ids, and
	// returns them
	nodeIDs := func(what string, r graphRun) []uint64 {
		t.Helper()
		wantRun(t, what, r, "probe_lw", 2)
		var ids []uint64
		for _, args := range r.args {
			if args[0] != 0x1234 || args[1] != 77 || args[2] != 0 || args[3]>>56 != agentproto.LaunchKindGraphSeq {
				t.Fatalf("%s: node arguments %v, want the application's, 0 and kind %#x with an id", what, args,
					agentproto.LaunchKindGraphSeq)
			}
			ids = append(ids, args[3]&agentproto.LaunchStreamMask)
		}
		return ids
	}

	t0 := agentproto.MonoNow()
	first := nodeIDs("first launch", a.graphRun(x))
	if first[0] == first[1] || min(first[0], first[1]) != 1 || max(first[0], first[1]) != 2 {
		t.Fatalf("ids %v, want 1 and 2 (one per node)", first)
	}
	if got := nodeIDs("second launch", a.graphRun(x)); !slices.Equal(got, first) {
		t.Fatalf("second launch: ids %v, want %v", got, first)
	}
	if l := a.output("gl " + x); !slices.Contains(l, "GRAPHLAUNCHED 700") {
		t.Fatalf("the third launch should fail: %v", l)
	}
	nodeIDs("after a failed launch", a.graphRun(x))
	t1 := agentproto.MonoNow()

	gs, err := c.GraphStamps()
	if err != nil {
		t.Fatal(err)
	}
	if len(gs.IDs) != 2 || len(gs.Runs) != 1 {
		t.Fatalf("stamps %+v: want 2 ids and 1 ring", gs)
	}
	ring := gs.IDs[0].Ring
	for _, id := range gs.IDs {
		if id.Ring != ring || id.Base != 0 || id.End != agentproto.GraphSeqOpen || (id.ID != 1 && id.ID != 2) {
			t.Fatalf("ids %+v: want 1 and 2 on one ring from launch 0, open", gs.IDs)
		}
	}
	run := gs.Runs[0]
	if run.Ring != ring || run.First != 0 || run.Lost != 0 || len(run.Stamps) != 3 {
		t.Fatalf("ring %+v: want the 3 launches that ran (the refused one gave its number back)", run)
	}
	for i, v := range run.Stamps {
		if v < t0 || v > t1 || (i > 0 && v < run.Stamps[i-1]) {
			t.Fatalf("stamps %v: want times in order between %d and %d", run.Stamps, t0, t1)
		}
	}
	if again, err := c.GraphStamps(); err != nil || len(again.IDs)+len(again.Runs) != 0 {
		t.Fatalf("a second read: %+v %v, want nothing new", again, err)
	}

	// into a capture: the originals are back in the captured copy
	if l := a.output("capbegin v2 0xca970000"); !slices.Contains(l, "CAPBEGUN 0") {
		t.Fatalf("capbegin: %v", l)
	}
	r := a.graphRunCmd("glc " + x)
	wantRun(t, "launched into a capture", r, "_Z6vecAddPfi", 2)
	if r.update != "ok" {
		t.Fatalf("into a capture: update %q, want the originals put back", r.update)
	}
	a.output("capend v2 0xca970000")
	next := nodeIDs("after the capture", a.graphRun(x))
	if min(next[0], next[1]) != 3 || max(next[0], next[1]) != 4 {
		t.Fatalf("after the capture: ids %v, want new ones (3 and 4)", next)
	}
	if _, err := c.Deactivate(k.Handle); err != nil {
		t.Fatal(err)
	}
	wantRun(t, "after deactivate", a.graphRun(x), "_Z6vecAddPfi", 2)
	gs, err = c.GraphStamps()
	if err != nil {
		t.Fatal(err)
	}
	ends := map[uint32][2]uint64{}
	for _, id := range gs.IDs {
		ends[id.ID] = [2]uint64{id.Base, id.End}
	}
	want := map[uint32][2]uint64{1: {0, 3}, 2: {0, 3}, 3: {3, 4}, 4: {3, 4}}
	if !maps.Equal(ends, want) {
		t.Fatalf("epochs %v, want %v (the capture ended the first at launch 3, the deactivate the second at 4)", ends, want)
	}
	if len(gs.Runs) != 1 || gs.Runs[0].First != 3 || len(gs.Runs[0].Stamps) != 1 {
		t.Fatalf("runs %+v: want the one launch after the capture (neither the captured nor the restoring one)", gs.Runs)
	}
}
