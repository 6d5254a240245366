package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpubpf/gpubpf/internal/testenv"
	"github.com/gpubpf/gpubpf/pkg/inject"
	"github.com/gpubpf/gpubpf/pkg/runtime/agentclient"
)

// A tool attached to a running program (-p) that does not answer for the
// program's module, as one reading PyTorch's GBs of device code from the
// process's files did not for seconds (the H200 training loop stood still
// for the whole 8 s trace): the launch that made the agent learn the module
// goes on after GPUBPF_AGENT_LATE_HOLD_MS (200 ms by default), though this
// program allows holds of ten minutes (GPUBPF_AGENT_HOLD_MS), and the
// program runs on while the tool is still attached.
func TestLateHoldBounded(t *testing.T) {
	testenv.Root(t)
	tool := gpubpfTool(t)
	// its module loaded and launched long before any agent
	a, appErr, sockDir := runningApp(t, "GPUBPF_AGENT_HOLD_MS=600000", "GPUBPF_AGENT_DEBUG=1")
	pid := a.app.Process.Pid
	if _, err := inject.Inject(pid, filepath.Join(filepath.Dir(tool), "libgpubpf-agent.so"), inject.Options{}); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GPUBPF_AGENT_SOCKET_DIR", sockDir)
	c, err := agentclient.DialWith(pid, agentclient.Options{Client: "a tool that never answers", Hold: true})
	if err != nil {
		t.Fatalf("dial the injected agent: %v\n%s", err, appErr.String())
	}
	defer c.Close()
	// the agent learns the module at this launch and holds it for the
	// tool, which never continues it (a hang here: the hold unbounded)
	for range 3 {
		if l := a.launch(); l != "LAUNCH _Z6vecAddPfi" {
			t.Fatalf("launch with a silent tool attached: %q", l)
		}
	}
	if !appErr.Has("the tools did not answer within 200 ms; its launch goes on uninstrumented") {
		t.Errorf("the agent did not say the late hold ran out:\n%s", appErr.String())
	}
	if n := strings.Count(appErr.String(), "did not answer within"); n != 1 {
		t.Errorf("%d late holds ran out, want 1 (one module, learnt once):\n%s", n, appErr.String())
	}
}
