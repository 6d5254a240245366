package launchlate

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/gpubpf/gpubpf/pkg/runtime"
	"github.com/gpubpf/gpubpf/pkg/runtime/instrument"
	"github.com/gpubpf/gpubpf/pkg/toolkit"
)

// Kernels without PTX (PyTorch's, cuBLAS's, Triton's cubins) carry no
// probe: their starts come from CUPTI's activity records, which the agent
// joins with the CPU time of each launch call (runtime.Options.KernelTimes).
// The same records give every kernel's duration, probed or not.

// Values of --timing.
const (
	timingAuto  = "auto"  // the probe where a kernel has PTX, CUPTI for the rest
	timingProbe = "probe" // probes only (no CUPTI in the process)
	timingBoth  = "both"  // auto, and with --events a CUPTI line for each probed launch too
)

// ownKernel: the agent's own kernels (its clock), should a record of one
// come without the stamp that tells the agent to leave it out.
func ownKernel(name string) bool { return strings.HasPrefix(name, "gpubpf_") }

// kernelTimes takes CUPTI's records since the last call: a kernel a probe
// times gives its duration; any other is timed from its record (untimed
// when the agent had no stamp for its launch call).
func (l *launchlate) kernelTimes(final bool) {
	if !l.cupti {
		return
	}
	recs, err := l.sess.KernelTimes(final)
	if err != nil {
		fmt.Fprintf(os.Stderr, "launchlate: %v\n", err)
	}
	l.addKernelTimes(recs)
}

// addKernelTimes takes CUPTI's records into the statistics (and --events).
func (l *launchlate) addKernelTimes(recs []runtime.KernelTime) {
	for _, r := range recs {
		if ownKernel(r.Kernel) || !l.wanted(r.Kernel) || l.traces != nil && !l.traces(r.Device) {
			continue
		}
		l.ktRecords++
		s := start{grid: r.Grid & gridMask, kernel: l.indexOf(r.Kernel), gpu: r.Start, cpu: r.CPU,
			stream: r.Stream, kind: kindDriver}
		if r.StreamUnknown {
			s.stream = streamUnknown
		}
		if r.Graph != 0 {
			s.kind, s.stream = kindGraphWord, 0
		}
		src := source{r.PID, r.Device, r.Ctx}
		dur := r.End - min(r.End, r.Start)
		st := l.get(l.keyOf(src, s))
		st.addDur(dur)
		if l.prom != nil {
			l.prom.observeDuration(r.PID, l.metricName(s.kernel, s.isGraph()), dur)
		}
		lat := latency{s: s, ns: int64(r.Start) - int64(r.CPU), dur: dur, cupti: true}
		if l.probed(s.kernel, r.Kernel) {
			if l.timing == timingBoth && l.events && r.CPU != 0 {
				l.batch = append(l.batch, launchEvent{src, lat})
			}
			continue
		}
		if r.CPU == 0 {
			l.untimed(src, s)
			l.ktUntimed++
			continue
		}
		l.timed(src, lat)
		st.cupti++
		l.ktTimed++
	}
}

// wanted says whether a kernel matches the -k patterns (CUPTI records
// every kernel).
func (l *launchlate) wanted(name string) bool {
	if len(l.patterns) == 0 {
		return true
	}
	w, ok := l.want[name]
	if !ok {
		for _, p := range l.patterns {
			if w = instrument.MatchOne(p, name); w {
				break
			}
		}
		if l.want == nil {
			l.want = map[string]bool{}
		}
		l.want[name] = w
	}
	return w
}

// probed says whether kernel i's launches are timed by its probe. Once
// instrumented, a kernel stays so for the trace (a kernel instrumented
// after its first launches, in a process attached with -p, had those timed
// by CUPTI).
func (l *launchlate) probed(i uint32, name string) bool {
	if l.probedK[i] {
		return true
	}
	if !l.instrumented(name) {
		return false
	}
	if l.probedK == nil {
		l.probedK = map[uint32]bool{}
	}
	l.probedK[i] = true
	return true
}

// ktAccount says where the kernels without PTX got their times, or why
// they got none; it returns st as the kernel account should tell it: kernels
// without PTX that CUPTI timed in every process are not "skipped".
func (l *launchlate) ktAccount(a *toolkit.Account, st runtime.Stats) runtime.Stats {
	if !l.cupti {
		return st
	}
	if l.ktTimed > 0 || l.ktUntimed > 0 {
		a.Add(l.ktTimed, "kernel starts timed through CUPTI", "kernels without PTX; CUPTI converts its GPU times to the CPU clock itself")
	}
	if l.ktUntimed > 0 {
		a.Add(l.ktUntimed, "CUPTI kernel records without a launch stamp", "counted, not timed: launched before the records were on, or their stamp was overwritten")
	}
	if st.KernelTimesDropped > 0 {
		a.Add(st.KernelTimesDropped, "CUPTI kernel records dropped", "CUPTI had no buffer, or the tool read too slowly: those launches are neither timed nor counted")
	}
	for _, pid := range slices.Sorted(maps.Keys(st.KernelTimesOff)) {
		a.Note(fmt.Sprintf("process %d: kernels without PTX not timed: %s", pid, st.KernelTimesOff[pid]))
	}
	for _, pid := range slices.Sorted(maps.Keys(st.KernelTimesLate)) {
		a.Note(fmt.Sprintf("process %d: CUPTI came on %s after the attach; kernels without PTX launched before that are not counted",
			pid, toolkit.FormatNs(uint64(st.KernelTimesLate[pid]))))
	}
	for _, pid := range slices.Sorted(maps.Keys(st.KernelTimesFrom)) {
		if st.KernelTimesRecords[pid] == 0 {
			// No kernel ran while CUPTI was on, or CUPTI saw none: its
			// account (the buffers it asked for, the launch callbacks
			// that came) tells which. CUPTI turned on mid-run does see a
			// running program's launches (-p on PyTorch and on a static
			// and a shared cudart program, H200, 2026-11-28).
			a.Note(fmt.Sprintf("process %d: CUPTI gave no kernel records: no kernel ran while it was on, or CUPTI did not "+
				"see them (its account follows)", pid))
			if seen := st.KernelTimesCUPTI[pid]; seen != "" {
				a.Note(fmt.Sprintf("process %d: %s", pid, seen))
			}
		}
	}
	libs := map[string]bool{}
	for _, lib := range st.KernelTimesFrom {
		libs[lib] = true
	}
	for _, lib := range slices.Sorted(maps.Keys(libs)) {
		a.Note("kernel times and run times from " + lib)
	}
	if len(st.KernelTimesOff) > 0 || len(st.KernelTimesFrom) == 0 {
		return st
	}
	skipped := map[string]string{}
	for k, why := range st.KernelsSkipped {
		if !strings.Contains(why, "no PTX") {
			skipped[k] = why
		}
	}
	if n := len(st.KernelsSkipped) - len(skipped); n > 0 {
		a.Note(fmt.Sprintf("%d kernels without PTX timed through CUPTI, not instrumented", n))
	}
	st.KernelsSkipped = skipped
	return st
}
