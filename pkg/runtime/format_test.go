package runtime

import (
	"testing"

	"github.com/gpubpf/gpubpf/pkg/runtime/agentproto"
)

// A module loaded from a file (cuModuleLoad) comes with no format: its
// first bytes tell a cubin or PTX text from a fatbin.
func TestFormatOf(t *testing.T) {
	ptx := ".version 8.7\n.target sm_90a\n.address_size 64\n.visible .entry triton_poi_0(.param .u64 p)\n{\n\tret;\n}\n"
	tests := []struct {
		name string
		m    agentproto.Module
		img  []byte
		want agentproto.ImageFormat
	}{
		{"cubin file", agentproto.Module{}, []byte("\x7fELF\x02\x01\x01"), agentproto.FormatELF},
		{"PTX file", agentproto.Module{}, []byte(ptx), agentproto.FormatPTX},
		{"fatbin file", agentproto.Module{}, []byte{0x50, 0xed, 0x55, 0xba, 1, 0, 0x10, 0}, agentproto.FormatUnknown},
		{"the agent's word wins", agentproto.Module{Format: agentproto.FormatFatbin}, []byte("\x7fELF"), agentproto.FormatFatbin},
	}
	for _, tc := range tests {
		if got := formatOf(tc.m, tc.img); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	mc, err := parseModule(agentproto.Module{}, []byte(ptx))
	if err != nil || len(mc.kernels) != 1 || mc.kernels[0].Name != "triton_poi_0" || !mc.kernels[0].HasPTX {
		t.Fatalf("PTX file: %+v, %v", mc, err)
	}
}
