package gpuevent_snoop

import "testing"

// Around the moment the agent takes a command's launches over, every
// launch is reported exactly once: by its probe event or by the agent's
// record. Synthetic events: "probe" steps are uprobe events in the order
// the reader handles them (before the switch began, while the launch
// events were being asked for, after the agent answered, or in flight at
// the detach), "fed" steps the agent's records, handled after all of them.
func TestLaunchSwitch(t *testing.T) {
	const (
		us     = 1000
		at     = 10_000 * us // the agent's attach_ns
		until  = at + 800*us // the launch probes all attached until then
		detach = at + 900*us // and none after
	)
	type step struct {
		phase  string // probe: before, pending, on, orphan; record: fed
		tid    uint32
		ts     uint64
		dur    uint64 // records: the call's duration in the driver
		driver bool   // a driver launch (probe on libcuda, or a record not called by cudart)
		grid   uint32
		want   bool // reported from this source
	}
	rt := func(phase string, tid uint32, ts uint64, want bool) step {
		return step{phase: phase, tid: tid, ts: ts, dur: 2 * us, grid: 4, want: want}
	}
	drv := func(phase string, tid uint32, ts uint64, want bool) step {
		return step{phase: phase, tid: tid, ts: ts, dur: 3 * us, driver: true, grid: 4, want: want}
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"probed before the switch began, in cudart across it (module loading): the probe reports it", []step{
			rt("before", 1, at-5000*us, true),
			rt("fed", 1, at+10*us, false),
		}},
		{"only a thread's latest launch before the switch began is matched", []step{
			rt("before", 1, at-5000*us, true),
			rt("before", 1, at-4000*us, true),
			rt("fed", 1, at+10*us, false),
			rt("fed", 1, at+20*us, true),
		}},
		{"runtime probe at or after attach_ns: the agent has it", []step{
			rt("on", 1, at, false),
			rt("fed", 1, at+3*us, true),
			rt("on", 1, at+20*us, false),
			rt("fed", 1, at+23*us, true),
		}},
		{"runtime probe before attach_ns, cudart reached the wrapper after the flag", []step{
			rt("on", 1, at-10*us, true),
			rt("fed", 1, at-5*us, false),
		}},
		{"runtime probe before attach_ns, wrapper before the flag: no record; the next launch is the agent's", []step{
			rt("on", 1, at-10*us, true),
			rt("on", 1, at+2*us, false),
			rt("fed", 1, at+4*us, true),
		}},
		{"runtime probe before attach_ns, next launch unprobed (after the detach)", []step{
			rt("on", 1, at-10*us, true),
			rt("fed", 1, detach+5*us, true),
		}},
		{"runtime probe before attach_ns, a record while the probes were being detached", []step{
			rt("on", 1, at-10*us, true),
			rt("fed", 1, until+5*us, true),
		}},
		{"runtime probe before attach_ns, wrapper reached much later but with the probes on (preempted)", []step{
			rt("on", 1, at-10*us, true),
			rt("fed", 1, at+700*us, false),
		}},
		{"probed while the events were being asked for, record much later (module loading)", []step{
			rt("pending", 1, at+2*us, true),
			rt("fed", 1, at+400*us, false),
		}},
		{"probed while asked for, before attach_ns, record within the window", []step{
			rt("pending", 1, at-30*us, true),
			rt("fed", 1, at-1*us, false),
		}},
		{"a different shape is another launch", []step{
			rt("on", 1, at-10*us, true),
			{phase: "fed", tid: 1, ts: at - 5*us, dur: 2 * us, grid: 8, want: true},
		}},
		{"driver probe inside the wrapper: the probe reports it, whatever the time", []step{
			drv("on", 1, at+1*us, true),
			drv("fed", 1, at-1*us, false),
			drv("on", 1, at+10*us, true),
			drv("fed", 1, at+9*us, false),
		}},
		{"driver probe whose wrapper missed the flag: no record; the next launch pairs with its own probe", []step{
			drv("on", 1, at-1*us, true),
			drv("on", 1, at+6*us, true),
			drv("fed", 1, at+5*us, false),
		}},
		{"driver record with the probe outside its call is another launch", []step{
			drv("on", 1, at+10*us, true),
			drv("fed", 1, at+1*us, true),
		}},
		{"threads are matched apart", []step{
			rt("on", 1, at-10*us, true),
			rt("on", 2, at-8*us, true),
			rt("on", 2, at+1*us, false),
			rt("fed", 2, at-6*us, false),
			rt("fed", 2, at+3*us, true),
			rt("fed", 1, at+30*us, false),
		}},
		{"a runtime record after a driver probe is not that launch", []step{
			drv("on", 1, at-10*us, true),
			rt("fed", 1, at-2*us, true),
		}},
		{"in flight at the detach, entered long before attach_ns", []step{
			rt("orphan", 1, at-3000*us, true),
			rt("fed", 1, at+500*us, false),
		}},
		{"in flight at the detach, reaching the wrapper after it: reported twice rather than lost", []step{
			rt("orphan", 1, at-3000*us, true),
			rt("fed", 1, detach+100*us, true),
		}},
		{"in flight at the detach, entered after attach_ns", []step{
			rt("orphan", 1, at+100*us, false),
			rt("fed", 1, at+102*us, true),
		}},
		{"records after the detach are not looked at", []step{
			rt("on", 1, at-10*us, true),
			rt("fed", 1, detach, true),
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newLaunchSwitch(7, func() uint64 { return 0 })
			var want, got struct{ probed, fed int }
			for i, st := range c.steps {
				switch st.phase {
				case "pending":
					if s.state == switchWaiting {
						s.begin()
					}
				case "on", "orphan", "fed":
					if s.state == switchWaiting {
						s.begin()
					}
					if s.state == switchPending {
						s.attached(at)
						s.probesUntil, s.detachNs, s.detached = until, detach, true
					}
				}
				e := Event{PID: 7, TID: st.tid, TS: st.ts, Grid: [3]uint32{st.grid, 1, 1}, Block: [3]uint32{32, 1, 1}}
				e.API = &apis[apiByName["cudaLaunchKernel"]]
				e.Func = 0x401000 // the host stub
				if st.driver {
					e.API = &apis[apiByName["cuLaunchKernel"]]
					e.Func, e.Stream = 0xf00, 0x55
				}
				var kept bool
				if st.phase == "fed" {
					if !st.driver {
						e.Func = 0xf00 // what cudart passed on
					}
					e.Dur = st.dur
					kept = s.fed(&e)
					if kept {
						got.fed++
					}
					if st.want {
						want.fed++
					}
				} else {
					e.EntryOnly = true
					kept = s.probed(&e)
					if kept {
						got.probed++
					}
					if st.want {
						want.probed++
					}
				}
				if kept != st.want {
					t.Errorf("step %d (%s, tid %d, ts attach%+dus): reported %v, want %v", i, st.phase, st.tid,
						(int64(st.ts)-at)/us, kept, st.want)
				}
			}
			// The account adds up: what each source reported, and what
			// each left out.
			if s.probedKept != uint64(got.probed) || got != want {
				t.Errorf("reported %+v (counted %d probed), want %+v", got, s.probedKept, want)
			}
			fedAll := 0
			for _, st := range c.steps {
				if st.phase == "fed" {
					fedAll++
				}
			}
			if s.fedDropped != uint64(fedAll-got.fed) {
				t.Errorf("%d records left out, counted %d", fedAll-got.fed, s.fedDropped)
			}
		})
	}
}

// The agent's records wait until the reader has emptied the BPF ring after
// the launch probes were detached, or until switchReadyAfter.
func TestLaunchSwitchReady(t *testing.T) {
	var emptied uint64
	s := newLaunchSwitch(7, func() uint64 { return emptied })
	if s.ready() {
		t.Fatal("ready before the agent answered")
	}
	s.begin()
	s.attached(100)
	emptied = 1 << 62
	if s.ready() {
		t.Fatal("ready before the probes were detached")
	}
	s.detachNs, s.detached = 1<<62, true // far ahead of MonoNow
	emptied = s.detachNs - 1
	if s.ready() {
		t.Fatal("ready though the ring was last emptied before the detach")
	}
	emptied = s.detachNs + 1
	if !s.ready() {
		t.Fatal("not ready after the ring was emptied past the detach")
	}
}
