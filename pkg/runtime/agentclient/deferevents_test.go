package agentclient

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpubpf/gpubpf/pkg/runtime/agentproto"
)

// Deferred launch events: an instrumented launch leaves its (clone,
// stream) event to be recorded when the agent needs ordering after it (a
// read of device memory, an unload), not on the launch path. The stand-in
// driver (FAKECUDA_EVENT_LOG=1) prints every cuEventRecord with its stream
// and calling thread ("main": the application's, which runs the commands;
// "other": the agent's), every cuStreamWaitEvent and cuEventSynchronize,
// and refuses records on destroyed streams and, while a capture is active,
// on the legacy stream (saying so on stderr).

// evTest is an app with a probe on vecAdd, a tool connection, and 64 bytes
// of device memory to read.
type evTest struct {
	t     *testing.T
	a     *app
	c     *Conn
	clone uint64
	addr  uint64
}

func startEvTest(t *testing.T, f fixture, env ...string) *evTest {
	t.Helper()
	a, c := f.startDialed(t, append([]string{"FAKECUDA_EVENT_LOG=1", "GPUBPF_AGENT_DEBUG=1"}, env...)...)
	k, lr := loadVecAddProbe(t, c, ".visible .entry probe_vecAdd (\n)", "probe_vecAdd")
	if err := c.Activate(k.Handle, lr.CloneID, lr.Functions[0].Handle); err != nil {
		t.Fatal(err)
	}
	addr, err := c.Alloc(OnDevice(0), 64)
	if err != nil {
		t.Fatal(err)
	}
	e := &evTest{t: t, a: a, c: c, clone: lr.CloneID, addr: addr}
	e.run("sync") // what the setup printed
	return e
}

// run sends cmd to the app and returns every line printed up to its DONE:
// the app's own, and the agent's driver calls made before it (the agent's
// replies come after them, so a line printed before run is called is in).
func (e *evTest) run(cmd string) []string {
	e.t.Helper()
	fmt.Fprintln(e.a.in, cmd)
	var out []string
	timeout := time.After(10 * time.Second)
	for {
		select {
		case l, ok := <-e.a.lines:
			if !ok {
				e.t.Fatalf("app exited during %q; stderr: %s", cmd, e.a.stderr)
			}
			if l == "DONE" {
				return out
			}
			out = append(out, l)
		case <-timeout:
			e.t.Fatalf("timed out in %q; so far %q", cmd, out)
		}
	}
}

// stream makes a stream in the app and returns its handle as %p prints it.
func (e *evTest) stream() string {
	e.t.Helper()
	for _, l := range e.run("mkstream") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "STREAM" && f[1] == "0" {
			return f[2]
		}
	}
	e.t.Fatal("mkstream: no stream")
	return ""
}

// read reads the device memory and returns the lines it printed.
func (e *evTest) read() []string {
	e.t.Helper()
	if _, err := e.c.Read(OnDevice(0), e.addr, 8); err != nil {
		e.t.Fatal(err)
	}
	return e.run("sync")
}

type evRec struct{ ev, stream, who string }

// records returns the EVREC lines of lines.
func records(lines []string) []evRec {
	var r []evRec
	for _, l := range lines {
		if f := strings.Fields(l); len(f) == 4 && f[0] == "EVREC" {
			r = append(r, evRec{f[1], f[2], f[3]})
		}
	}
	return r
}

// launch runs cmd (one instrumented launch) and returns its records.
func (e *evTest) launch(cmd string) []evRec {
	e.t.Helper()
	lines := e.run(cmd)
	if !slices.Contains(lines, "LAUNCH probe_vecAdd") {
		e.t.Fatalf("%s: no instrumented launch in %q", cmd, lines)
	}
	return records(lines)
}

// wantRecords checks that lines record exactly once on each of streams
// (any order), all from thread who, and that each record comes before a
// wait or synchronisation on its event.
func wantRecords(t *testing.T, what string, lines []string, who string, streams ...string) {
	t.Helper()
	recs := records(lines)
	var got []string
	for _, r := range recs {
		got = append(got, r.stream)
		if r.who != who {
			t.Errorf("%s: record %v from the %s thread, want %s", what, r, r.who, who)
		}
		at := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "EVREC "+r.ev+" ") })
		if !slices.ContainsFunc(lines[at:], func(l string) bool {
			f := strings.Fields(l)
			return len(f) > 1 && (f[0] == "EVWAIT" && len(f) == 3 && f[2] == r.ev) || (f[0] == "EVSYNC" && len(f) == 2 && f[1] == r.ev)
		}) {
			t.Errorf("%s: nothing waits for event %s after its record: %q", what, r.ev, lines)
		}
	}
	slices.Sort(got)
	want := slices.Clone(streams)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("%s: records on streams %q, want %q (lines %q)", what, got, want, lines)
	}
}

func (e *evTest) clean() {
	e.t.Helper()
	if strings.Contains(e.a.stderr.String(), "FAKECUDA:") {
		e.t.Errorf("the stand-in driver refused a call: %s", e.a.stderr)
	}
}

func TestDeferredLaunchEvents(t *testing.T) {
	f := build(t)

	// (a) No record on the launch path of a stream the application made
	// (the legacy stream's launches record at once: a record made there
	// later would be a new barrier between blocking streams); a read
	// records once per stream launched on before it waits, and nothing
	// when nothing was launched since; a free and an unload record before
	// they synchronise.
	t.Run("deferred", func(t *testing.T) {
		e := startEvTest(t, f)
		s1, s2 := e.stream(), e.stream()
		for _, cmd := range []string{"ks " + s1, "ks " + s1, "ks " + s1, "ks " + s2, "ks " + s2} {
			if r := e.launch(cmd); len(r) != 0 {
				t.Fatalf("%s recorded on the launch path: %v", cmd, r)
			}
		}
		for range 2 {
			if r := e.launch("launch"); len(r) != 1 || r[0].stream != "(nil)" || r[0].who != "main" {
				t.Fatalf("a legacy-stream launch recorded %v, want one record on (nil) from the main thread", r)
			}
		}
		wantRecords(t, "read", e.read(), "other", s1, s2)
		if r := records(e.read()); len(r) != 0 {
			t.Fatalf("a read with no launch since recorded %v", r)
		}
		e.launch("ks " + s2)
		lines := e.read()
		wantRecords(t, "read after one launch", lines, "other", s2)
		if n := len(slices.DeleteFunc(lines, func(l string) bool { return !strings.HasPrefix(l, "EVWAIT ") })); n != 3 {
			t.Errorf("read waits for %d events, want all 3 streams'", n)
		}
		spare, err := e.c.Alloc(OnDevice(0), 64)
		if err != nil {
			t.Fatal(err)
		}
		e.run("sync")
		e.launch("ks " + s2)
		if err := e.c.Free(OnDevice(0), spare); err != nil {
			t.Fatal(err)
		}
		wantRecords(t, "free", e.run("sync"), "other", s2)
		e.launch("ks " + s1)
		if err := e.c.Unload(e.clone); err != nil {
			t.Fatal(err)
		}
		lines = e.run("sync")
		wantRecords(t, "unload", lines, "other", s1)
		if i, j := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "EVREC ") }),
			slices.Index(lines, "UNLOAD probe_vecAdd"); i < 0 || j < i {
			t.Errorf("unload: the record does not precede the module's unload: %q", lines)
		}
		if !e.a.stderr.Has("launch events: deferred") {
			t.Errorf("the agent's log does not say launch events are deferred:\n%s", e.a.stderr)
		}
		e.clean()
	})

	// (b) The escape hatch: every launch records at once, a read has
	// nothing left to record.
	t.Run("GPUBPF_AGENT_DEFER_EVENTS=0", func(t *testing.T) {
		e := startEvTest(t, f, "GPUBPF_AGENT_DEFER_EVENTS=0")
		s1 := e.stream()
		for _, cmd := range []string{"ks " + s1, "ks " + s1, "launch"} {
			r := e.launch(cmd)
			want := s1
			if cmd == "launch" {
				want = "(nil)"
			}
			if len(r) != 1 || r[0].stream != want || r[0].who != "main" {
				t.Fatalf("%s: records %v, want one on %s from the launching thread", cmd, r, want)
			}
		}
		if r := records(e.read()); len(r) != 0 {
			t.Fatalf("the read recorded %v", r)
		}
		if !e.a.stderr.Has("launch events: recorded at each instrumented launch (GPUBPF_AGENT_DEFER_EVENTS=0)") {
			t.Errorf("the agent's log does not say why launches record:\n%s", e.a.stderr)
		}
		e.clean()
	})

	// (c) A stream destroyed with launches pending gets its record before
	// it goes, from the destroying thread; later flushes never name it, and
	// a read still waits for its event. A stream already recorded goes
	// without one. Many streams made and destroyed do not use the clone's
	// entries up.
	t.Run("stream destroyed", func(t *testing.T) {
		e := startEvTest(t, f)
		s1, s2 := e.stream(), e.stream()
		e.launch("ks " + s1)
		e.launch("ks " + s1)
		e.launch("ks " + s2)
		lines := e.run("sdestroy " + s1)
		r := records(lines)
		if len(r) != 1 || r[0].stream != s1 || r[0].who != "main" || !slices.Contains(lines, "SDESTROYED 0") ||
			slices.Index(lines, "SDESTROYED 0") < slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "EVREC ") }) {
			t.Fatalf("destroy of a stream with pending launches: %q, want its record first", lines)
		}
		ev1 := r[0].ev
		lines = e.read()
		wantRecords(t, "read after the destroy", lines, "other", s2)
		if !slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, "EVWAIT ") && strings.HasSuffix(l, " "+ev1) }) {
			t.Errorf("the read does not wait for the destroyed stream's event %s: %q", ev1, lines)
		}
		if r := records(e.run("sdestroy " + s2)); len(r) != 0 {
			t.Errorf("destroy of a stream with nothing pending recorded %v", r)
		}
		for i := 0; i < 20; i++ {
			s := e.stream()
			e.launch("ks " + s)
			e.run("sdestroy " + s)
		}
		s3 := e.stream()
		if r := e.launch("ks " + s3); len(r) != 0 {
			t.Fatalf("after 20 streams came and went, a launch recorded %v", r)
		}
		wantRecords(t, "read after 20 streams came and went", e.read(), "other", s3)
		e.clean()
	})

	// (a2) A program without a blocking stream: its legacy-stream launches
	// defer too (a later record there orders only the legacy stream's own
	// work), also next to non-blocking streams; once it makes a blocking
	// stream, or launches on the per-thread default stream, they record
	// at once again.
	for _, how := range []string{"mkstream", "ks 0x2"} {
		t.Run("legacy deferred until "+how, func(t *testing.T) {
			e := startEvTest(t, f)
			nb := ""
			for _, l := range e.run("mkstreamnb") {
				if f := strings.Fields(l); len(f) == 3 && f[0] == "STREAM" && f[1] == "0" {
					nb = f[2]
				}
			}
			for _, cmd := range []string{"launch", "ks 0x1", "ks " + nb} {
				if r := e.launch(cmd); len(r) != 0 {
					t.Fatalf("%s recorded on the launch path with no blocking stream: %v", cmd, r)
				}
			}
			wantRecords(t, "read", e.read(), "other", "(nil)", "0x1", nb)
			if how == "mkstream" {
				e.stream()
			} else {
				e.launch(how)
			}
			if r := e.launch("launch"); len(r) != 1 || r[0].stream != "(nil)" || r[0].who != "main" {
				t.Fatalf("after %s: a legacy-stream launch recorded %v, want one record on (nil) from the main thread", how, r)
			}
			e.clean()
		})
	}

	// (d) While a capture is active, launches on other streams record at
	// once and the agent records nothing; before it begins, what was
	// pending is recorded from the capturing thread; after it ends, launches
	// defer again. Each way cudart begins one (and an end or begin that
	// fails ends or begins nothing).
	for _, how := range []string{"v2", "v1", "ptsz", "graph"} {
		t.Run("capture "+how, func(t *testing.T) {
			e := startEvTest(t, f)
			capStream, s2 := e.stream(), e.stream()
			if how == "ptsz" {
				capStream = "0" // the per-thread default stream
			}
			asks := func(lines []string) int {
				return len(slices.DeleteFunc(slices.Clone(lines), func(l string) bool { return !strings.HasPrefix(l, "ISCAPTURING ") }))
			}
			// no capture active: the driver is not asked for a status
			if n := asks(e.run("ks " + s2)); n != 0 {
				t.Fatalf("a launch with no capture active asked the driver %d times", n)
			}
			e.launch("launch") // the legacy stream: recorded at once
			lines := e.run("capbegin " + how + " " + capStream)
			if !slices.Contains(lines, "CAPBEGUN 0") {
				t.Fatalf("capture did not begin: %q", lines)
			}
			wantRecordsBefore(t, lines, "BEGINCAPTURE ", s2)
			for range 2 {
				lines := e.run("ks " + s2)
				if r := records(lines); len(r) != 1 || r[0].stream != s2 || r[0].who != "main" {
					t.Fatalf("launch during the capture: records %v, want one on %s at once", r, s2)
				}
				if n := asks(lines); n != 1 {
					t.Fatalf("a launch during a capture asked the driver %d times for its stream's status, want 1", n)
				}
			}
			if r := records(e.read()); len(r) != 0 {
				t.Fatalf("a read during the capture recorded %v", r)
			}
			if how == "v2" {
				// a second begin on the capturing stream fails; an end
				// of a stream not capturing fails: neither counts
				if l := e.run("capbegin v2 " + capStream); !slices.Contains(l, "CAPBEGUN 401") {
					t.Fatalf("second begin: %q", l)
				}
				if l := e.run("capend v2 " + s2); !slices.Contains(l, "CAPENDED 401") {
					t.Fatalf("end of a stream not capturing: %q", l)
				}
				if r := e.launch("ks " + s2); len(r) != 1 {
					t.Fatalf("after a failed begin and end, a launch during the capture recorded %v", r)
				}
			}
			if l := e.run("capend " + how + " " + capStream); !slices.Contains(l, "CAPENDED 0") {
				t.Fatalf("capture did not end: %q", l)
			}
			if lines := e.run("ks " + s2); len(records(lines)) != 0 || asks(lines) != 0 {
				t.Fatalf("after the capture ended a launch recorded or asked: %q", lines)
			}
			wantRecords(t, "read after the capture", e.read(), "other", s2)
			e.clean()
		})
	}

	// (f) A live snapshot copies what is there now: it records none of the
	// pending launches' events and waits for none; an ordered one does both.
	t.Run("live snapshot", func(t *testing.T) {
		e := startEvTest(t, f)
		reg, err := e.c.RegisterMemfd(OnDevice(0), newMemfd(t, 4096), 4096, 0)
		if err != nil {
			t.Fatal(err)
		}
		s1 := e.stream()
		e.launch("ks " + s1)
		if err := e.c.Snapshot(OnDevice(0), e.addr, reg.RegionID, 0, 64, agentproto.SnapshotLive); err != nil {
			t.Fatal(err)
		}
		if lines := e.run("sync"); slices.ContainsFunc(lines, func(l string) bool {
			return strings.HasPrefix(l, "EVREC ") || strings.HasPrefix(l, "EVWAIT ")
		}) {
			t.Fatalf("a live snapshot recorded or waited: %q", lines)
		}
		if err := e.c.Snapshot(OnDevice(0), e.addr, reg.RegionID, 0, 64, 0); err != nil {
			t.Fatal(err)
		}
		wantRecords(t, "ordered snapshot", e.run("sync"), "other", s1)
		e.clean()
	})

	// (e) The per-thread default stream (a _ptsz launch on stream 0, or
	// its handle named) is only its thread's: those launches record at once.
	t.Run("per-thread default stream", func(t *testing.T) {
		e := startEvTest(t, f)
		for _, cmd := range []string{"launchp", "ks 0x2"} {
			if r := e.launch(cmd); len(r) != 1 || r[0].stream != "0x2" || r[0].who != "main" {
				t.Fatalf("%s: records %v, want one on 0x2 at once", cmd, r)
			}
		}
		if r := records(e.read()); len(r) != 0 {
			t.Fatalf("the read recorded %v", r)
		}
		e.clean()
	})
}

// wantRecordsBefore checks that lines record once on each of streams from
// the application's thread, all before the line starting with mark.
func wantRecordsBefore(t *testing.T, lines []string, mark string, streams ...string) {
	t.Helper()
	at := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, mark) })
	if at < 0 {
		t.Fatalf("no %q in %q", mark, lines)
	}
	recs := records(lines[:at])
	if len(records(lines[at:])) != 0 || len(recs) != len(streams) {
		t.Fatalf("want %d records before %q, got %q", len(streams), mark, lines)
	}
	for _, r := range recs {
		if r.who != "main" || !slices.Contains(streams, r.stream) {
			t.Errorf("record %v before %q: want one of %q from the application's thread", r, mark, streams)
		}
	}
}
