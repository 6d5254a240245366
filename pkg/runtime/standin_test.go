package runtime

import (
	"bufio"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/gpubpf/gpubpf/internal/testenv"
	"github.com/gpubpf/gpubpf/pkg/runtime/agentclient"
	"github.com/gpubpf/gpubpf/pkg/runtime/agentproto"
	"github.com/gpubpf/gpubpf/pkg/runtime/gpumap"
)

// standInApp starts the agent's test application with the real agent
// preloaded over the stand-in driver (pkg/runtime/agent/testdata) and
// connects to it.
func standInApp(t *testing.T) (*agentclient.Conn, *exec.Cmd) {
	t.Helper()
	dir := t.TempDir()
	rig := testenv.BuildStandIn(t, dir)
	sockDir := filepath.Join(dir, "sock")
	os.MkdirAll(sockDir, 0o755)
	t.Setenv("GPUBPF_AGENT_SOCKET_DIR", sockDir)
	cmd := exec.Command(rig.App)
	cmd.Env = append(os.Environ(), "LD_PRELOAD="+rig.Agent, "LD_LIBRARY_PATH="+rig.CUDADir)
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(); cmd.Process.Kill(); cmd.Wait() })
	sc := bufio.NewScanner(out)
	if !sc.Scan() || sc.Text() != "READY" {
		t.Fatalf("the test application did not start: %q", sc.Text())
	}
	go func() {
		for sc.Scan() {
		}
	}()
	var c *agentclient.Conn
	var err error
	for range 100 {
		if c, err = agentclient.Dial(cmd.Process.Pid); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, cmd
}

// A device-resident map read live comes through its mirror as the device
// memory is at each read, while ReadMaps still reads through the agent;
// after the map is released, a live read makes no new mirror.
func TestReadMapsLive(t *testing.T) {
	conn, _ := standInApp(t)
	spec := specWith(map[string]ebpf.MapType{"table": 1503}, prog("p", "kprobe/k", "table"))
	spec.Maps["table"].MaxEntries = 1000
	s := &Session{spec: spec, procs: map[int]*Process{}, kern: &kernelSide{}}
	target := agentproto.Target{Device: 0}
	d := &device{target: target, maps: map[string]*placedMap{}}
	p := &Process{PID: 4242, s: s, conn: conn, devs: map[agentproto.Target]*device{target: d}}
	d.p = p
	s.procs[p.PID] = p
	pl, err := gpumap.PlacementOf(spec.Maps["table"])
	if err != nil {
		t.Fatal(err)
	}
	addr, err := conn.Alloc(target, gpumap.SizeOf(pl))
	if err != nil {
		t.Fatal(err)
	}
	pl.Addr = addr
	if err := conn.Write(target, addr, gpumap.Init(pl)[:gpumap.HeaderSize]); err != nil {
		t.Fatal(err)
	}
	m := &placedMap{name: "table", spec: spec.Maps["table"], place: pl, devAddr: addr}
	d.maps["table"] = m
	put := func(i uint32, v uint64) {
		t.Helper()
		if err := conn.Write(target, addr+gpumap.HeaderSize+uint64(i)*8, binary.LittleEndian.AppendUint64(nil, v)); err != nil {
			t.Fatal(err)
		}
	}
	value := func(copies []MapCopy, i uint32) uint64 {
		t.Helper()
		if len(copies) != 1 {
			t.Fatalf("%d copies, want 1", len(copies))
		}
		v, err := gpumap.ArrayValue(copies[0].Data, 8, i, false)
		if err != nil {
			t.Fatal(err)
		}
		return binary.LittleEndian.Uint64(v)
	}
	put(999, 77)
	copies, err := s.ReadMapsLive("table")
	if err != nil {
		t.Fatal(err)
	}
	if v := value(copies, 999); v != 77 || m.mem == nil {
		t.Fatalf("first live read: table[999] = %d (mirror %v), want 77", v, m.mem != nil)
	}
	mirror := m.region
	put(999, 78)
	put(3, 5)
	copies, _ = s.ReadMapsLive("table")
	if value(copies, 999) != 78 || value(copies, 3) != 5 || m.region != mirror {
		t.Fatalf("second live read: table[999] = %d, [3] = %d, region %d (first %d)", value(copies, 999), value(copies, 3), m.region, mirror)
	}
	if copies, _ := s.ReadMaps("table"); value(copies, 3) != 5 {
		t.Fatalf("ordered read: table[3] = %d, want 5", value(copies, 3))
	}
	m.unmap()
	if _, err := p.readLive(d, m); err != errDetached || m.mem != nil {
		t.Fatalf("a live read after release: %v, mirror %v", err, m.mem != nil)
	}
}

// A process that exits while the session calibrates its clocks is not a
// failed calibration: Calibrate says nothing about it.
func TestCalibrateProcessGone(t *testing.T) {
	conn, cmd := standInApp(t)
	s := &Session{procs: map[int]*Process{}, kern: &kernelSide{}}
	target := agentproto.Target{Device: 0}
	d := &device{target: target, maps: map[string]*placedMap{}}
	p := &Process{PID: cmd.Process.Pid, s: s, conn: conn, devs: map[agentproto.Target]*device{target: d}}
	d.p = p
	s.procs[p.PID] = p
	cmd.Process.Kill()
	cmd.Wait()
	select {
	case <-conn.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the connection did not end with the process")
	}
	if cs, err := s.Calibrate(2); err != nil || len(cs) != 0 {
		t.Fatalf("calibrating an exited process: %v samples, %v", cs, err)
	}
}
