package runtime

import (
	"testing"

	"github.com/gpubpf/gpubpf/pkg/runtime/agentproto"
)

// Modules of one context share one placement of the maps: a device's
// primary context is named by its device, as the libraries' clones name it;
// a context of the application's own by its handle.
func TestContextTarget(t *testing.T) {
	for _, tc := range []struct {
		name string
		m    agentproto.Module
		want agentproto.Target
	}{
		{"primary context of device 0", agentproto.Module{Ctx: 0x55, Device: 0, Primary: true}, agentproto.Target{Device: 0}},
		{"primary context of device 3", agentproto.Module{Ctx: 0x77, Device: 3, Primary: true}, agentproto.Target{Device: 3}},
		{"a context of its own on device 1", agentproto.Module{Ctx: 0x99, Device: 1}, agentproto.Target{Device: 1, Ctx: 0x99}},
		{"device unknown (an older agent's record)", agentproto.Module{Ctx: 0x99, Device: -1, Primary: true}, agentproto.Target{Ctx: 0x99}},
	} {
		if got := contextTarget(tc.m); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}
