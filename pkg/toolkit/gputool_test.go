package toolkit

import (
	"encoding/binary"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpubpf/gpubpf/pkg/promexport"
	"github.com/gpubpf/gpubpf/pkg/runtime"
	"github.com/urfave/cli/v2"
)

func words(v ...uint64) []byte {
	b := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(b[i*8:], x)
	}
	return b
}

// --per-device: each device's maps summed over the processes and contexts
// that used it, beside the total; with -i, each as its change.
func TestReportPerDevice(t *testing.T) {
	var got []*Report
	o := &reporter{t: GPUTool{Report: func(r *Report) { got = append(got, r) }}, interval: true, byCopy: map[copyKey][]byte{
		{"runs", 1, 0, 0}:     words(10, 1),
		{"runs", 2, 0, 0}:     words(5, 0),
		{"runs", 1, 1, 0}:     words(100, 7),
		{"runs", 1, 1, 0xabc}: words(1, 1),
	}}
	o.sum()
	o.report(true)
	r := got[0]
	if !reflect.DeepEqual(r.Devices(), []int{0, 1}) {
		t.Fatalf("devices %v", r.Devices())
	}
	if u := r.U64("runs"); !reflect.DeepEqual(u, []uint64{116, 9}) {
		t.Errorf("total %v, want [116 9]", u)
	}
	if u := r.ForDevice(0).U64("runs"); !reflect.DeepEqual(u, []uint64{15, 1}) {
		t.Errorf("device 0 %v, want [15 1]", u)
	}
	if u := r.ForDevice(1).U64("runs"); !reflect.DeepEqual(u, []uint64{101, 8}) {
		t.Errorf("device 1 %v, want [101 8]", u)
	}
	o.byCopy[copyKey{"runs", 1, 1, 0}] = words(150, 7)
	o.sum()
	o.report(true)
	r = got[1]
	if u := r.ForDevice(1).U64("runs"); !reflect.DeepEqual(u, []uint64{50, 0}) {
		t.Errorf("device 1's change %v, want [50 0]", u)
	}
	if u := r.ForDevice(1).Total("runs"); !reflect.DeepEqual(u, []uint64{151, 8}) {
		t.Errorf("device 1's total %v, want [151 8]", u)
	}
	if u := r.ForDevice(0).U64("runs"); !reflect.DeepEqual(u, []uint64{0, 0}) {
		t.Errorf("device 0's change %v, want zeros", u)
	}
}

// --prometheus: the account's counted clauses, by what they count.
func TestAccountExport(t *testing.T) {
	a := &Account{Tool: "threadhist"}
	a.Add(5, "kernels instrumented", "")
	a.Add(2, "records dropped", "the ring was full")
	a.Note("a note has no number")
	e := promexport.New("threadhist", 0)
	a.Export(e)
	got, err := e.Values()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"gpubpf_threadhist_account|kernels instrumented": 5, "gpubpf_threadhist_account|records dropped": 2}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("exported %v, want %v", got, want)
	}

	// the tools export their account at every refresh: the same family,
	// its numbers replaced (registering it again panicked on the H200)
	b := &Account{Tool: "threadhist"}
	b.Add(7, "kernels instrumented", "")
	b.Export(e)
	if got, err = e.Values(); err != nil {
		t.Fatal(err)
	}
	want["gpubpf_threadhist_account|kernels instrumented"] = 7
	if !reflect.DeepEqual(got, want) {
		t.Errorf("exported again: %v, want %v", got, want)
	}
}

// --no-drop: the wait bound the runtime gets (0 without the flag, or in a
// tool without RingFlags), and the account's clause when warps waited.
func TestNoDrop(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		flags bool
		want  time.Duration
	}{
		{nil, true, 0},
		{[]string{"--no-drop"}, true, 100 * time.Millisecond},
		{[]string{"--no-drop", "--no-drop-wait", "5ms"}, true, 5 * time.Millisecond},
		{[]string{"--no-drop-wait", "5ms"}, true, 0},
		{[]string{"--no-drop", "--no-drop-wait", "0s"}, true, time.Microsecond},
		{nil, false, 0},
	} {
		app := &cli.App{Name: "t", Action: func(c *cli.Context) error {
			if got := RingWaitOf(c); got != tc.want {
				t.Errorf("%v: %v, want %v", tc.args, got, tc.want)
			}
			return nil
		}}
		if tc.flags {
			app.Flags = RingFlags()
		}
		if err := app.Run(append([]string{"t"}, tc.args...)); err != nil {
			t.Fatal(err)
		}
	}
	st := runtime.Stats{RecordsProduced: 10, Records: 8, RingDrops: 2, RingWaits: 5, RingWaitDrops: 1}
	if got := RecordAccount(st); !strings.Contains(got, "5 warps waited for room in a full ring (--no-drop), 1 of them dropped after waiting the whole bound") {
		t.Errorf("account %q: want the waits", got)
	}
	if got := RecordAccount(runtime.Stats{RecordsProduced: 1, Records: 1}); strings.Contains(got, "waited") || strings.Contains(got, "--ring-mb") {
		t.Errorf("account %q: no waits or drops, none said", got)
	}
	// records dropped without --no-drop: what would keep them
	if got := RecordAccount(runtime.Stats{RecordsProduced: 10, Records: 4, RingDrops: 6}); !strings.Contains(got, "6 dropped (ring full); a larger --ring-mb holds a longer burst, --no-drop loses none") {
		t.Errorf("account %q: want the way to lose fewer", got)
	}
}

// --ring-mb: MiB to bytes, a power of two up to 16 GiB, else a usage error.
func TestRingBytesOf(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want uint64
		err  string
	}{
		{nil, 0, ""},
		{[]string{"--ring-mb", "256"}, 256 << 20, ""},
		{[]string{"--ring-mb", "3"}, 0, "--ring-mb 3: want a power of two"},
		{[]string{"--ring-mb", "32768"}, 0, "at most 16384"},
	} {
		app := &cli.App{Name: "t", Flags: RingFlags(), Action: func(c *cli.Context) error {
			got, err := RingBytesOf(c)
			if err != nil || got != tc.want {
				t.Errorf("%v: %d, %v; want %d", tc.args, got, err, tc.want)
			}
			return nil
		}}
		// a bad value is refused as the flags are parsed, a usage error
		err := app.Run(append([]string{"t"}, tc.args...))
		var ue *UsageError
		if (err != nil) != (tc.err != "") || (err != nil && (!errors.As(err, &ue) || !strings.Contains(err.Error(), tc.err))) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.err)
		}
	}
}

// No kernel instrumented: a pattern that matched none of the process's
// kernels says so with the closest names; one that matched kernels the
// trace ended before instrumenting (-p on a process with GBs of device
// code) says that instead of "no kernel matched".
func TestNoKernelMatched(t *testing.T) {
	seen := runtime.Stats{KernelsSeen: map[string]bool{"_Z9vectorAddPKfS0_Pfi": true, "sm90_xmma_gemm": true}}
	for _, tc := range []struct {
		name     string
		patterns []string
		st       runtime.Stats
		want     string
	}{
		{"none matched", []string{"vecAdd"}, seen, "no kernel matched vecAdd among the 2 kernels the process loaded"},
		{"matched, trace over first", []string{"*"}, seen, "2 of the 2 kernels the process loaded matched *, but the trace ended before any of them was instrumented"},
		{"instrumented", []string{"*"}, runtime.Stats{KernelsSeen: seen.KernelsSeen, KernelsMatched: map[string]bool{"sm90_xmma_gemm": true}}, ""},
		{"timed by CUPTI", []string{"*"}, runtime.Stats{KernelsSeen: seen.KernelsSeen, KernelTimesFrom: map[int]string{7: "libcupti"}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := noKernelMatched(tc.patterns, tc.st)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("error %v, want none", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}
