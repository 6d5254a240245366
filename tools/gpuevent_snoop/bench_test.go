package gpuevent_snoop

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// The CPU proxy of the GPU launch-rate goal (scripts/gpu/gpuevent_snoop-check.sh
// measures the real one): testdata/bench's launch_heavy makes launches
// through a stand-in cudart that calls a stand-in driver the way the real
// ones do, each launch a 2.5 us busy wait; it runs untraced and under each
// set-up of the tool alternately, launchRounds rounds, and the medians are
// compared. GPUEVENT_SNOOP_BENCH_BASE=PATH adds another build of the tool
// (e.g. an earlier commit's) as the set-up "base".
//
//	sudo go test -run '^$' -bench LaunchRate -v ./tools/gpuevent_snoop/
const (
	launchRounds  = 5
	benchLaunches = 50000
)

type launchSetup struct {
	name  string
	bin   string // launch_heavy or launch_heavy_shared
	flags []string
	tool  string // "" for untraced; else the tool binary
}

type launchResult struct {
	rates []float64 // launches/s, one per round
	hits  []float64 // probe hits per launch, one per round
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}

var (
	rateRe = regexp.MustCompile(`launches_per_s=([0-9.]+)`)
	hitsRe = regexp.MustCompile(`([0-9.]+) probe hits per launch`)
)

// runLaunchHeavy runs one set-up once: launches per second, and probe hits
// per launch (as the tool reports them; -1 if it did not).
func runLaunchHeavy(tb testing.TB, s launchSetup) (float64, float64) {
	argv := []string{filepath.Join(workDir, "bench", s.bin), strconv.Itoa(benchLaunches), "4"}
	if s.tool != "" {
		argv = append(append(append([]string{s.tool}, s.flags...), "--"), argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = workDir
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	if err := cmd.Run(); err != nil {
		tb.Fatalf("%s: %v\n%s%s", strings.Join(argv, " "), err, o.Bytes(), e.Bytes())
	}
	m := rateRe.FindSubmatch(o.Bytes())
	if m == nil || !bytes.Contains(o.Bytes(), []byte("RESULT launch_heavy ok")) {
		tb.Fatalf("%s: no RESULT ok\n%s%s", strings.Join(argv, " "), o.Bytes(), e.Bytes())
	}
	rate, _ := strconv.ParseFloat(string(m[1]), 64)
	hits := -1.0
	if m := hitsRe.FindSubmatch(e.Bytes()); m != nil {
		hits, _ = strconv.ParseFloat(string(m[1]), 64)
	}
	return rate, hits
}

var (
	launchOnce    sync.Once
	launchSetups  []launchSetup
	launchResults map[string]*launchResult
)

func BenchmarkLaunchRateCPUProxy(b *testing.B) {
	build(b)
	launchOnce.Do(func() {
		// The default takes the launches from the agent (next to the
		// tool) after the first milliseconds; the others are the probe
		// mechanisms, which --no-agent keeps for the whole run.
		launchSetups = []launchSetup{
			{name: "untraced", bin: "launch_heavy"},
			{name: "default", bin: "launch_heavy", tool: toolBin},
			{name: "probes", bin: "launch_heavy", tool: toolBin, flags: []string{"--no-agent"}},
			{name: "no-driver", bin: "launch_heavy", tool: toolBin, flags: []string{"--no-agent", "--no-driver"}},
			{name: "launch-entry", bin: "launch_heavy", tool: toolBin, flags: []string{"--no-agent", "--launch-entry"}},
			{name: "driver-launches", bin: "launch_heavy", tool: toolBin, flags: []string{"--driver-launches"}},
			{name: "untraced-shared", bin: "launch_heavy_shared"},
			{name: "default-shared", bin: "launch_heavy_shared", tool: toolBin},
			{name: "probes-shared", bin: "launch_heavy_shared", tool: toolBin, flags: []string{"--no-agent"}},
		}
		if base := os.Getenv("GPUEVENT_SNOOP_BENCH_BASE"); base != "" {
			launchSetups = append(launchSetups, launchSetup{name: "base", bin: "launch_heavy", tool: base})
		}
		launchResults = map[string]*launchResult{}
		for _, s := range launchSetups {
			launchResults[s.name] = &launchResult{}
		}
		// Alternating set-ups within each round spreads the machine's
		// drift (a shared VM) over all of them.
		for r := 0; r < launchRounds; r++ {
			for _, s := range launchSetups {
				rate, hits := runLaunchHeavy(b, s)
				res := launchResults[s.name]
				res.rates = append(res.rates, rate)
				if hits >= 0 {
					res.hits = append(res.hits, hits)
				}
			}
		}
		cpu := "unknown CPU"
		if c, err := os.ReadFile("/proc/cpuinfo"); err == nil {
			if m := regexp.MustCompile(`model name\s*:\s*(.*)`).FindSubmatch(c); m != nil {
				cpu = string(m[1])
			}
		}
		var t strings.Builder
		fmt.Fprintf(&t, "launch_heavy CPU proxy, %d launches, 2.5 us each, %d rounds (medians), %s:\n", benchLaunches, launchRounds, cpu)
		fmt.Fprintf(&t, "  %-16s %12s %7s %14s\n", "set-up", "launches/s", "ratio", "hits/launch")
		for _, s := range launchSetups {
			res := launchResults[s.name]
			untraced := launchResults["untraced"]
			if strings.HasSuffix(s.name, "-shared") {
				untraced = launchResults["untraced-shared"]
			}
			hits := "-"
			if len(res.hits) > 0 {
				hits = fmt.Sprintf("%.2f", median(res.hits))
			}
			fmt.Fprintf(&t, "  %-16s %12.0f %7.3f %14s   %s\n", s.name, median(res.rates), median(res.rates)/median(untraced.rates), hits, strings.Join(s.flags, " "))
		}
		b.Log(t.String())
	})
	ratio := func(name, base string) float64 {
		return median(launchResults[name].rates) / median(launchResults[base].rates)
	}
	// ns/op: what tracing adds to one launch under the default (the
	// loop itself runs once, not b.N times).
	b.ReportMetric(1e9/median(launchResults["default"].rates)-1e9/median(launchResults["untraced"].rates), "ns/op")
	b.ReportMetric(median(launchResults["untraced"].rates), "untraced-launches/s")
	b.ReportMetric(ratio("default", "untraced"), "ratio-default")
	b.ReportMetric(median(launchResults["default"].hits), "hits/launch-default")
	b.ReportMetric(ratio("probes", "untraced"), "ratio-probes")
	b.ReportMetric(median(launchResults["probes"].hits), "hits/launch-probes")
	b.ReportMetric(ratio("driver-launches", "untraced"), "ratio-driver-launches")
	b.ReportMetric(ratio("default-shared", "untraced-shared"), "ratio-default-shared")
	if _, ok := launchResults["base"]; ok {
		b.ReportMetric(ratio("base", "untraced"), "ratio-base")
	}
}
