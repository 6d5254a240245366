// Package graphs accounts for the CUDA graphs a traced process launches:
// the agent counts every executable graph's launches, kernel-node runs and
// what of them ran instrumented (agentproto.GraphExec, cumulative since its
// first tool came); a Tracker turns those counts into the ones of this
// trace, and Sum into the totals and reasons a tool prints.
package graphs

import (
	"fmt"
	"sort"
	"strings"

	"github.com/gpubpf/gpubpf/pkg/runtime/agentproto"
)

// Exec is one executable graph of a traced process, its counts since the
// trace began there.
type Exec struct {
	PID int
	agentproto.GraphExec
}

// Tracker holds one process's counts as they were when the trace began.
type Tracker struct {
	pid  int
	base map[uint64]agentproto.GraphExec
	last []Exec
}

// NewTracker starts pid's account from the agent's counts at the attach.
func NewTracker(pid int, atAttach []agentproto.GraphExec) *Tracker {
	t := &Tracker{pid: pid, base: map[uint64]agentproto.GraphExec{}}
	for _, x := range atAttach {
		t.base[x.Exec] = x
	}
	return t
}

// Update takes the agent's counts now; Execs then returns this trace's.
func (t *Tracker) Update(now []agentproto.GraphExec) {
	out := make([]Exec, 0, len(now))
	for _, x := range now {
		b, ok := t.base[x.Exec]
		if ok && x.Exec != 0 && x.Launches < b.Launches {
			// the handle was destroyed and handed out again: a new exec
			// (the old one's counts went to exec 0)
			b, ok = agentproto.GraphExec{}, false
		}
		if ok {
			x.Launches -= b.Launches
			x.LaunchesInstrumented -= min(b.LaunchesInstrumented, x.LaunchesInstrumented)
			x.LaunchesKernelTimes -= min(b.LaunchesKernelTimes, x.LaunchesKernelTimes)
			x.KernelRuns -= min(b.KernelRuns, x.KernelRuns)
			x.KernelRunsInstrumented -= min(b.KernelRunsInstrumented, x.KernelRunsInstrumented)
			x.Captured -= min(b.Captured, x.Captured)
		}
		if x.Launches == 0 {
			continue
		}
		out = append(out, Exec{PID: t.pid, GraphExec: x})
	}
	t.last = out
}

// Execs returns the graphs launched since the trace began, as of the last
// Update.
func (t *Tracker) Execs() []Exec { return t.last }

// Totals is the graph clause of a tool's account.
type Totals struct {
	Execs                  int    // executable graphs launched
	Launches               uint64 // their launches
	LaunchesInstrumented   uint64 // with instrumented kernel nodes
	LaunchesKernelTimes    uint64 // while CUPTI's kernel records were on
	KernelRuns             uint64 // kernel-node runs of graphs whose nodes are known
	KernelRunsInstrumented uint64
	LaunchesUnknown        uint64 // launches of graphs whose nodes the agent does not know
	Captured               uint64 // launches into a stream capture
	// NotInstrumented: launches that ran the original kernel nodes,
	// grouped by why.
	NotInstrumented []Group
}

// Group is the launches that ran the original kernel nodes for one reason.
type Group struct {
	Why         string
	Execs       int
	Launches    uint64
	KernelNodes int // -1: not known
	PIDs        []int
}

// Sum adds up execs. A graph launched with its original nodes counts in a
// group even when other launches of it were instrumented (before the
// probes were ready, say); graphs whose kernels no probe targets (NoProbe,
// never instrumented) are left out of the groups: the kernel account says
// why for each kernel.
func Sum(execs []Exec) Totals {
	var t Totals
	groups := map[string]*Group{}
	for _, x := range execs {
		if x.Exec != 0 {
			t.Execs++
		}
		t.Launches += x.Launches
		t.LaunchesInstrumented += x.LaunchesInstrumented
		t.LaunchesKernelTimes += x.LaunchesKernelTimes
		t.KernelRuns += x.KernelRuns
		t.KernelRunsInstrumented += x.KernelRunsInstrumented
		t.Captured += x.Captured
		if x.KernelNodes == agentproto.GraphNodesUnknown && x.Exec != 0 {
			t.LaunchesUnknown += x.Launches
		}
		orig := x.Launches - min(x.LaunchesInstrumented+x.Captured, x.Launches)
		if orig == 0 || x.Exec == 0 || (x.Why == agentproto.GraphNoProbe && x.LaunchesInstrumented == 0) {
			continue
		}
		why := reason(x.GraphExec)
		g := groups[why]
		if g == nil {
			g = &Group{Why: why, KernelNodes: nodes(x.KernelNodes)}
			groups[why] = g
		}
		g.Execs++
		g.Launches += orig
		if nodes(x.KernelNodes) != g.KernelNodes {
			g.KernelNodes = -1
		}
		if !containsInt(g.PIDs, x.PID) {
			g.PIDs = append(g.PIDs, x.PID)
		}
	}
	for _, g := range groups {
		sort.Ints(g.PIDs)
		t.NotInstrumented = append(t.NotInstrumented, *g)
	}
	sort.Slice(t.NotInstrumented, func(i, j int) bool {
		a, b := t.NotInstrumented[i], t.NotInstrumented[j]
		if a.Launches != b.Launches {
			return a.Launches > b.Launches
		}
		return a.Why < b.Why
	})
	return t
}

func nodes(n uint32) int {
	if n == agentproto.GraphNodesUnknown {
		return -1
	}
	return int(n)
}

func containsInt(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// reason words why x ran its original nodes: the agent's text, with the
// driver's answer where it gave one.
func reason(x agentproto.GraphExec) string {
	why := x.WhyText
	switch x.Why {
	case agentproto.GraphInstrumented, agentproto.GraphNoProbe:
		// instrumented for part of the trace (NoProbe: its probes went
		// as the trace ended): the rest came before the probes were
		// ready, or after they were taken down
		why = ProbesNotReady
	case agentproto.GraphRefused, agentproto.GraphRestoreFailed:
		if x.Detail != "" {
			why += fmt.Sprintf(" (%s, CUresult %d)", x.Detail, x.CUResult)
		} else if x.CUResult != 0 {
			why += fmt.Sprintf(" (CUresult %d)", x.CUResult)
		}
	case agentproto.GraphChangedInPlace:
		if x.Detail != "" {
			why += " (" + x.Detail + ")"
		}
	}
	if why == "" {
		why = fmt.Sprintf("reason %d", x.Why)
	}
	return why
}

// ProbesNotReady is why the launches of a graph instrumented for part of
// the trace ran its original nodes.
const ProbesNotReady = "launched while the probes were being readied or taken down"

// Clause is the account's graph clause, "" when no graph was launched:
// "1 CUDA graph launched 2997 times: 5994 kernel-node runs, 5994
// instrumented".
func (t Totals) Clause() string {
	if t.Launches == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d CUDA graph%s launched %d time%s", t.Execs, plural(t.Execs), t.Launches, plural(t.Launches))
	switch {
	case t.KernelRuns > 0 || t.LaunchesUnknown < t.Launches:
		fmt.Fprintf(&b, ": %d kernel-node runs, %d instrumented", t.KernelRuns, t.KernelRunsInstrumented)
		if t.LaunchesUnknown > 0 {
			fmt.Fprintf(&b, " (+ the runs of %d launches of graphs whose nodes are not known)", t.LaunchesUnknown)
		}
	default:
		b.WriteString(": kernel nodes not known")
	}
	if t.LaunchesKernelTimes > 0 {
		fmt.Fprintf(&b, "; %d launches while CUPTI timed kernels", t.LaunchesKernelTimes)
	}
	if t.Captured > 0 {
		fmt.Fprintf(&b, "; %d launched into a stream capture", t.Captured)
	}
	for _, g := range t.NotInstrumented {
		nodes := "kernel nodes not known"
		if g.KernelNodes >= 0 {
			nodes = fmt.Sprintf("%d kernel node%s", g.KernelNodes, plural(g.KernelNodes))
		}
		es := "es"
		if g.Launches == 1 {
			es = ""
		}
		fmt.Fprintf(&b, "; %d launch%s of %d graph%s (%s) not instrumented: %s", g.Launches, es, g.Execs, plural(g.Execs), nodes, g.Why)
	}
	return b.String()
}

func plural[T int | uint64](n T) string {
	if n == 1 {
		return ""
	}
	return "s"
}
