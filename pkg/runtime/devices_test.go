package runtime

import (
	"strings"
	"testing"

	"github.com/gpubpf/gpubpf/pkg/runtime/agentproto"
)

// --device: only the GPUs asked for are traced, and one the process does
// not have is an error that lists the ones it has.
func TestDevices(t *testing.T) {
	all := &Session{}
	two := &Session{opts: Options{Devices: []int{1, 3}}}
	for d, want := range map[int][2]bool{0: {true, false}, 1: {true, true}, 3: {true, true}} {
		if all.Traces(d) != want[0] || two.Traces(d) != want[1] {
			t.Errorf("device %d: traced %v / %v, want %v", d, all.Traces(d), two.Traces(d), want)
		}
	}
	have := []agentproto.Device{{Ordinal: 0, Name: "H100"}, {Ordinal: 1, Name: "H100"}}
	if err := devicesExist([]int{1}, have); err != nil {
		t.Errorf("device 1 of 2: %v", err)
	}
	err := devicesExist([]int{0, 5}, have)
	if err == nil || !strings.Contains(err.Error(), "--device 5: the process sees 2 GPU(s): 0 (H100), 1 (H100)") {
		t.Errorf("device 5 of 2: %v", err)
	}
}
