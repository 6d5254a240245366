package gpuevent_snoop

import (
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/gpubpf/gpubpf/pkg/toolkit"
)

// Indexes of the BPF counters array (enum ges_counter).
const (
	cntRingbufFull = iota
	cntInflightFull
	cntNested
	cntNoEntry
	cntLaunch
	cntLaunchChecked
	numCounters
)

// maxAPIs is GES_MAX_APIS: the BPF side counts hits per API id below it.
const maxAPIs = 64

func init() {
	if len(apis) > maxAPIs {
		panic(fmt.Sprintf("%d APIs, the BPF hit counters hold %d", len(apis), maxAPIs))
	}
}

// countedAccount is the account's clauses with a number: what was seen,
// shown, dropped, lost and folded, the kernels named, the processes and
// objects probed (tr held by the caller). The end of the trace adds its
// notes; while tracing these are exported as they stand.
func countedAccount(tr *Tracer, cnt [numCounters]uint64, att *Attacher) *toolkit.Account {
	acc := &toolkit.Account{Tool: "gpuevent_snoop"}
	acc.Add(tr.Seen, "events", "")
	if tr.Shown != tr.Seen-tr.Internal {
		acc.Add(tr.Shown, "shown", "the rest filtered by -k/--min-size")
	}
	acc.Add(cnt[cntRingbufFull], "dropped", "ring buffer full: raise --ring-mb")
	acc.Add(cnt[cntInflightFull], "lost", "in-flight call table full")
	acc.Add(cnt[cntNested], "nested calls folded", "driver calls made by a traced runtime call")
	if tr.Internal > 0 {
		acc.Add(tr.Internal, "cudart-internal driver calls left out", "")
	}
	if cnt[cntNoEntry] > 0 {
		acc.Add(cnt[cntNoEntry], "returns without entry", "calls already running at attach")
	}
	if named, unnamed := tr.KernelCounts(); named+unnamed > 0 {
		acc.Add(uint64(named), "kernels named", "")
		if unnamed > 0 {
			acc.Add(uint64(unnamed), "kernels unnamed", "driver CUfunction handles or objects without symbols")
		}
	}
	acc.Add(uint64(len(tr.procs)), "processes", "")
	acc.Add(uint64(len(att.Objects())), "objects probed", "")
	return acc
}

// sumPerCPU reads slot i of a per-CPU array summed over the CPUs.
func sumPerCPU(m *ebpf.Map, i uint32) uint64 {
	var vs []uint64
	if err := m.Lookup(i, &vs); err != nil {
		return 0
	}
	var n uint64
	for _, v := range vs {
		n += v
	}
	return n
}

func readCounters(m *ebpf.Map) [numCounters]uint64 {
	var out [numCounters]uint64
	for i := range out {
		out[i] = sumPerCPU(m, uint32(i))
	}
	return out
}

// probeHits is how often each API's probes fired in traced processes.
type probeHits struct {
	entry, ret [maxAPIs]uint64
}

func readHits(m *ebpf.Map) probeHits {
	var h probeHits
	for i := range apis {
		h.entry[i] = sumPerCPU(m, uint32(2*i))
		h.ret[i] = sumPerCPU(m, uint32(2*i+1))
	}
	return h
}

// total is every probe hit.
func (h *probeHits) total() uint64 {
	var n uint64
	for i := range apis {
		n += h.entry[i] + h.ret[i]
	}
	return n
}

// launch is the hits on launch functions, runtime and driver (a driver
// launch cudart makes for a runtime launch included): what a launch costs.
func (h *probeHits) launch() uint64 {
	var n uint64
	for i := range apis {
		if apis[i].IsLaunch() {
			n += h.entry[i] + h.ret[i]
		}
	}
	return n
}

// perLaunch is launch probe hits per launch, 0 without launches.
func (h *probeHits) perLaunch(launches uint64) float64 {
	if launches == 0 {
		return 0
	}
	return float64(h.launch()) / float64(launches)
}

// layers says, per layer, how it was observed: the mechanism and the
// objects probed, and in how many processes the driver's launch functions
// were probed (and why).
type layers struct {
	runtime, driver string
	driverLaunches  string
	stepped         map[string]string // API -> what its probe sits on, for single-stepped probes
}

func (a *Attacher) Layers(processes int) layers {
	a.mu.Lock()
	defer a.mu.Unlock()
	var rt, drv []string
	l := layers{stepped: map[string]string{}}
	for _, o := range a.objs {
		base := filepath.Base(o.shown)
		if o.runtime {
			rt = append(rt, base)
		}
		if o.driver {
			drv = append(drv, base)
		}
		for _, pl := range []*probeList{&o.main, &o.rtLaunch, &o.launch} {
			for i, sym := range pl.syms {
				if strings.HasPrefix(pl.notes[i], "single-stepped") {
					l.stepped[sym] = pl.notes[i]
				}
			}
		}
	}
	describe := func(objs []string) string {
		if len(objs) == 0 {
			return ""
		}
		if len(objs) > 3 {
			objs = append(objs[:3:3], fmt.Sprintf("%d more", len(objs)-3))
		}
		return a.mode.String() + " on " + strings.Join(objs, ", ")
	}
	l.runtime, l.driver = describe(rt), describe(drv)
	if a.noDriver && l.driver != "" {
		l.driver += " (kernel lookups only: --no-driver)"
	}
	switch {
	case len(drv) == 0 || a.noDriver:
	case a.allDriverLaunches:
		l.driverLaunches = "in every process"
	default:
		why := ""
		if len(a.driverIn) == 1 {
			for pid, w := range a.driverIn {
				why = " (" + w + ")"
				if a.agentIn[pid] {
					why = " (" + w + ", until the gpubpf agent took its launches over)"
				}
			}
		}
		l.driverLaunches = fmt.Sprintf("in %d of %d processes%s", len(a.driverIn), max(processes, len(a.driverIn)), why)
	}
	return l
}

// accountLayers adds what observed each layer, the launch results checked
// and the probe hits per launch to the completeness line.
func accountLayers(add func(string), l layers, mode attachMode, launchEntry bool, cnt [numCounters]uint64, hits *probeHits) {
	if l.runtime != "" {
		add("runtime layer by " + l.runtime)
	}
	if l.driver != "" {
		s := "driver layer by " + l.driver
		if l.driverLaunches != "" {
			s += ", its launch functions " + l.driverLaunches
		}
		add(s)
	}
	launches := cnt[cntLaunch]
	if launches == 0 {
		return
	}
	if cnt[cntLaunchChecked] < launches {
		how := "first launch of each configuration, launches after a failure, 1 in " + strconv.Itoa(launchSampleMask+1)
		if launchEntry || mode != modeSession {
			how = "--launch-entry"
		}
		add(fmt.Sprintf("launch results checked on %d of %d launches (%s)", cnt[cntLaunchChecked], launches, how))
	}
	add(fmt.Sprintf("%.2f probe hits per launch", hits.perLaunch(launches)))
}

// steppedLaunches lists the launch APIs hit whose probe the kernel
// single-steps.
func steppedLaunches(l layers, hits *probeHits) []string {
	var out []string
	for i := range apis {
		if apis[i].IsLaunch() && hits.entry[i] > 0 && l.stepped[apis[i].Name] != "" {
			out = append(out, apis[i].Name)
		}
	}
	sort.Strings(out)
	return out
}
