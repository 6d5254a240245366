package graphs

import (
	"reflect"
	"strings"
	"testing"

	"github.com/gpubpf/gpubpf/pkg/runtime/agentproto"
)

const unknown = agentproto.GraphNodesUnknown

// The trace's counts are the agent's less what it had counted when the
// tool came; a handle destroyed and made again counts from zero; graphs not
// launched in the trace are left out.
func TestTrackerSince(t *testing.T) {
	tr := NewTracker(7, []agentproto.GraphExec{
		{Exec: 0, Launches: 10},
		{Exec: 0x10, Launches: 100, LaunchesInstrumented: 40, KernelRuns: 200, KernelRunsInstrumented: 80, KernelNodes: 2},
		{Exec: 0x20, Launches: 50, KernelNodes: 1},
		{Exec: 0x30, Launches: 5, KernelNodes: 1},
	})
	tr.Update([]agentproto.GraphExec{
		{Exec: 0, Launches: 10},
		{Exec: 0x10, Launches: 130, LaunchesInstrumented: 70, KernelRuns: 260, KernelRunsInstrumented: 140, KernelNodes: 2},
		{Exec: 0x20, Launches: 3, KernelNodes: 1}, // destroyed and made again
		{Exec: 0x30, Launches: 5, KernelNodes: 1},
		{Exec: 0x40, Launches: 9, KernelNodes: unknown, Why: agentproto.GraphBeforeAgent},
	})
	got := map[uint64]agentproto.GraphExec{}
	for _, x := range tr.Execs() {
		if x.PID != 7 {
			t.Fatalf("pid %d", x.PID)
		}
		got[x.Exec] = x.GraphExec
	}
	want := map[uint64]agentproto.GraphExec{
		0x10: {Exec: 0x10, Launches: 30, LaunchesInstrumented: 30, KernelRuns: 60, KernelRunsInstrumented: 60, KernelNodes: 2},
		0x20: {Exec: 0x20, Launches: 3, KernelNodes: 1},
		0x40: {Exec: 0x40, Launches: 9, KernelNodes: unknown, Why: agentproto.GraphBeforeAgent},
	}
	if len(got) != len(want) {
		t.Fatalf("execs %+v, want %+v", got, want)
	}
	for k, w := range want {
		if got[k] != w {
			t.Fatalf("exec %#x: %+v, want %+v", k, got[k], w)
		}
	}
}

func TestSumAndClause(t *testing.T) {
	for _, tc := range []struct {
		name  string
		execs []Exec
		want  Totals
		say   []string // in the clause
	}{
		{name: "nothing", execs: nil, want: Totals{}},
		{
			name: "instrumented",
			execs: []Exec{{PID: 1, GraphExec: agentproto.GraphExec{Exec: 1, Launches: 2997, LaunchesInstrumented: 2997,
				KernelRuns: 5994, KernelRunsInstrumented: 5994, KernelNodes: 2, InstrumentedNodes: 2}}},
			want: Totals{Execs: 1, Launches: 2997, LaunchesInstrumented: 2997, KernelRuns: 5994, KernelRunsInstrumented: 5994},
			say:  []string{"1 CUDA graph launched 2997 times: 5994 kernel-node runs, 5994 instrumented"},
		},
		{
			name: "made before the agent, and some before the probes",
			execs: []Exec{
				{PID: 1, GraphExec: agentproto.GraphExec{Exec: 1, Launches: 3000, KernelNodes: unknown, Why: agentproto.GraphBeforeAgent,
					WhyText: "instantiated before the gpubpf agent was loaded", LaunchesKernelTimes: 2990}},
				// its probes taken down as the trace ended: decided again, no probe
				{PID: 2, GraphExec: agentproto.GraphExec{Exec: 2, Launches: 10, LaunchesInstrumented: 8, KernelRuns: 20,
					KernelRunsInstrumented: 16, KernelNodes: 2, Why: agentproto.GraphNoProbe}},
			},
			want: Totals{Execs: 2, Launches: 3010, LaunchesInstrumented: 8, LaunchesKernelTimes: 2990, KernelRuns: 20,
				KernelRunsInstrumented: 16, LaunchesUnknown: 3000, NotInstrumented: []Group{
					{Why: "instantiated before the gpubpf agent was loaded", Execs: 1, Launches: 3000, KernelNodes: -1, PIDs: []int{1}},
					{Why: ProbesNotReady, Execs: 1, Launches: 2, KernelNodes: 2, PIDs: []int{2}},
				}},
			say: []string{"2 CUDA graphs launched 3010 times: 20 kernel-node runs, 16 instrumented (+ the runs of 3000 launches of graphs whose nodes are not known)",
				"2990 launches while CUPTI timed kernels",
				"3000 launches of 1 graph (kernel nodes not known) not instrumented: instantiated before the gpubpf agent was loaded",
				"2 launches of 1 graph (2 kernel nodes) not instrumented: " + ProbesNotReady},
		},
		{
			name: "refused, and no probe for its kernels (said per kernel elsewhere)",
			execs: []Exec{
				{PID: 1, GraphExec: agentproto.GraphExec{Exec: 1, Launches: 5, KernelRuns: 5, KernelNodes: 1, Why: agentproto.GraphRefused,
					WhyText: "the driver refused the update of its nodes", Detail: "topology changed", CUResult: 910}},
				{PID: 1, GraphExec: agentproto.GraphExec{Exec: 3, Launches: 4, KernelRuns: 4, KernelNodes: 1, Why: agentproto.GraphNoProbe,
					WhyText: "no probe for any of its kernels"}},
				{PID: 1, GraphExec: agentproto.GraphExec{Exec: 0, Launches: 6, KernelRuns: 6}}, // destroyed since
			},
			want: Totals{Execs: 2, Launches: 15, KernelRuns: 15, NotInstrumented: []Group{
				{Why: "the driver refused the update of its nodes (topology changed, CUresult 910)", Execs: 1, Launches: 5, KernelNodes: 1, PIDs: []int{1}},
			}},
			say: []string{"5 launches of 1 graph (1 kernel node) not instrumented: the driver refused the update of its nodes (topology changed, CUresult 910)"},
		},
		{
			name: "nodes of none known",
			execs: []Exec{{PID: 1, GraphExec: agentproto.GraphExec{Exec: 1, Launches: 1, KernelNodes: unknown,
				Why: agentproto.GraphBeforeAgent, WhyText: "w"}}},
			want: Totals{Execs: 1, Launches: 1, LaunchesUnknown: 1, NotInstrumented: []Group{{Why: "w", Execs: 1, Launches: 1, KernelNodes: -1, PIDs: []int{1}}}},
			say:  []string{"1 CUDA graph launched 1 time: kernel nodes not known", "1 launch of 1 graph"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Sum(tc.execs)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Sum:\n got %+v\nwant %+v", got, tc.want)
			}
			c := got.Clause()
			if tc.want.Launches == 0 && c != "" {
				t.Fatalf("clause %q for no launch", c)
			}
			for _, s := range tc.say {
				if !strings.Contains(c, s) {
					t.Fatalf("clause %q lacks %q", c, s)
				}
			}
		})
	}
}
