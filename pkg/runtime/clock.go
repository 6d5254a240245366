package runtime

import (
	"errors"
	"fmt"
	"sort"
)

// ClockSample relates one context's %globaltimer to the CPU's
// CLOCK_MONOTONIC (the clock of bpf_ktime_get_ns) in one process: at CPU
// time At, globaltimer read Offset ns ahead of it, give or take Bound.
// The two clocks drift apart by tens of microseconds in seconds, so a tool
// that compares them calibrates again every few seconds.
type ClockSample struct {
	PID, Device int
	Ctx         uint64 // as MapCopy.Ctx
	Offset      int64
	Bound, At   uint64
}

// GPUToCPU converts a globaltimer reading to CLOCK_MONOTONIC.
func (c ClockSample) GPUToCPU(gt uint64) uint64 { return uint64(int64(gt) - c.Offset) }

// Calibrate measures the clock offset in every context the session placed
// maps in, in every traced process (rounds round trips each, the best
// kept). A context that cannot be measured now (the GPU is busy with work
// that does not let the clock kernel start) is reported in the error and
// left out; the others are returned.
func (s *Session) Calibrate(rounds int) ([]ClockSample, error) {
	var out []ClockSample
	var errs []error
	for _, p := range s.Processes() {
		if p.conn == nil {
			continue
		}
		for _, d := range p.placed() {
			c, err := p.calibrate(d, rounds)
			if err != nil {
				select {
				case <-p.conn.Done():
					// the process exited as it was asked: nothing
					// left to calibrate, not a failure
				default:
					errs = append(errs, err)
				}
				continue
			}
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].PID != out[j].PID {
			return out[i].PID < out[j].PID
		}
		if out[i].Device != out[j].Device {
			return out[i].Device < out[j].Device
		}
		return out[i].Ctx < out[j].Ctx
	})
	return out, errors.Join(errs...)
}

// clockRounds is how many round trips the runtime's own calibrations take.
const clockRounds = 8

// calibrate measures d's clock and keeps the sample in the session.
func (p *Process) calibrate(d *device, rounds int) (ClockSample, error) {
	r, err := p.conn.Clock(d.target, rounds)
	if err != nil {
		return ClockSample{}, fmt.Errorf("process %d, device %d: clock calibration: %w", p.PID, d.target.Device, err)
	}
	c := ClockSample{PID: p.PID, Device: int(d.target.Device), Ctx: d.target.Ctx, Offset: r.Offset, Bound: r.Bound, At: r.At}
	p.s.mu.Lock()
	p.s.clocks = append(p.s.clocks, c)
	p.s.mu.Unlock()
	return c, nil
}

// ClockSamples returns every calibration taken so far (Options.Clocks and
// Calibrate), in the order taken.
func (s *Session) ClockSamples() []ClockSample {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]ClockSample(nil), s.clocks...)
}

// ClockSamplesSince returns the calibrations taken after the first n, and
// how many there are now: a tool that takes them as they come copies each
// once (an hour's attach takes thousands).
func (s *Session) ClockSamplesSince(n int) ([]ClockSample, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]ClockSample(nil), s.clocks[min(n, len(s.clocks)):]...), len(s.clocks)
}
