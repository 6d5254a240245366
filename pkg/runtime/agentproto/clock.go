package agentproto

import "golang.org/x/sys/unix"

// MonoNow reads CLOCK_MONOTONIC, the clock of every timestamp in this
// protocol (launch stamps, clock samples, ring-drain arrival and reply) and
// of bpf_ktime_get_ns, so a tool can place the agent's readings among its own.
func MonoNow() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) // cannot fail for this clock
	return uint64(ts.Nano())
}
