package agentclient

// The fault suite's socket cases (issue 13; scripts/gpu/faults-check.sh
// cases 9 and 10) on this GPU-less machine, against the real agent in the
// fake-driver app: malformed traffic and connections from another uid must
// leave the application unharmed and the agent serving a normal tool. The
// GPU check runs the same client (scripts/gpu/agent_fuzz.py) against CUDA
// samples.

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpubpf/gpubpf/internal/testenv"
	"github.com/gpubpf/gpubpf/pkg/runtime/agentproto"
)

const fuzzScript = "../../../scripts/gpu/agent_fuzz.py"

// rawConn is a control connection without the client's framing and checks.
type rawConn struct {
	t *testing.T
	c *net.UnixConn
}

func dialRaw(t *testing.T, pid int) *rawConn {
	t.Helper()
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: SocketPath(pid), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{t: t, c: c}
}

func rawFrame(op uint16, req uint32, length uint32, payload []byte) []byte {
	b := make([]byte, 12, 12+len(payload))
	binary.LittleEndian.PutUint32(b, length)
	binary.LittleEndian.PutUint16(b[4:], op)
	binary.LittleEndian.PutUint32(b[8:], req)
	return append(b, payload...)
}

func (r *rawConn) send(b []byte) error {
	_, err := r.c.Write(b)
	return err
}

// next reads the next frame that is not a notification.
func (r *rawConn) next(d time.Duration) (op uint16, req uint32, payload []byte, err error) {
	r.c.SetReadDeadline(time.Now().Add(d))
	for {
		var h [12]byte
		if _, err = io.ReadFull(r.c, h[:]); err != nil {
			return
		}
		n := binary.LittleEndian.Uint32(h[:])
		op, req = binary.LittleEndian.Uint16(h[4:]), binary.LittleEndian.Uint32(h[8:])
		payload = make([]byte, n)
		if _, err = io.ReadFull(r.c, payload); err != nil || req != 0 {
			return
		}
	}
}

// reply sends one request and returns its status, checking that the
// agent answers it exactly once (a list sent right after must be answered
// next).
func (r *rawConn) reply(op uint16, req uint32, payload []byte) int32 {
	r.t.Helper()
	if err := r.send(rawFrame(op, req, uint32(len(payload)), payload)); err != nil {
		r.t.Fatalf("op %d: %v", op, err)
	}
	gop, greq, p, err := r.next(5 * time.Second)
	if err != nil || gop != op || greq != req || len(p) < 4 {
		r.t.Fatalf("op %d request %d: got op %d request %d, %d bytes, %v", op, req, gop, greq, len(p), err)
	}
	st := int32(binary.LittleEndian.Uint32(p))
	r.send(rawFrame(uint16(agentproto.OpList), req+1, 4, []byte{1, 0, 0, 0}))
	gop, greq, p2, err := r.next(5 * time.Second)
	if err != nil || gop != uint16(agentproto.OpList) || greq != req+1 {
		r.t.Fatalf("after op %d request %d the agent sent op %d request %d (%d bytes, %v): one reply per request", op, req, gop, greq, len(p2), err)
	}
	return st
}

func (r *rawConn) hello() {
	r.t.Helper()
	p := []byte{4, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 'r', 'a', 'w', '!'}
	if st := r.reply(uint16(agentproto.OpHello), 1, p); st != 0 {
		r.t.Fatalf("hello: status %d", st)
	}
}

// closedByAgent reports whether the agent closes the connection (within 5 s).
func (r *rawConn) closedByAgent() bool {
	r.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := io.Copy(io.Discard, r.c)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

// stillServes checks that the application launches its own kernel and that
// a normal client can still instrument it: what a tool does after the
// faults.
func stillServes(t *testing.T, a *app, pid int) {
	t.Helper()
	if got := a.launch("launch"); got != "_Z6vecAddPfi" {
		t.Fatalf("the application ran %s, want its own kernel", got)
	}
	c, err := Dial(pid)
	if err != nil {
		t.Fatalf("a normal client after the faults: %v", err)
	}
	k, lr := loadVecAddProbe(t, c, ".visible .entry after_faults (\n)", "after_faults")
	if err := c.Activate(k.Handle, lr.CloneID, lr.Functions[0].Handle); err != nil {
		t.Fatal(err)
	}
	if got := a.launch("launch"); got != "after_faults" {
		t.Fatalf("probe activated after the faults not routed: ran %s", got)
	}
	c.Close()
	a.expect("UNLOAD after_faults")
	if got := a.launch("launch"); got != "_Z6vecAddPfi" {
		t.Fatalf("after the client closed the application ran %s", got)
	}
}

// Garbage, truncated, oversized and out-of-order messages (case 9).
func TestAgentSurvivesMalformedTraffic(t *testing.T) {
	f := build(t)
	a := f.start(t)
	pid := a.cmd.Process.Pid

	// Oversized: the agent closes without answering or reading on.
	r := dialRaw(t, pid)
	r.send(rawFrame(uint16(agentproto.OpHello), 1, 64<<20+1, nil))
	if !r.closedByAgent() {
		t.Fatal("a frame of 64 MiB + 1 did not close the connection")
	}
	// Truncated header and payload, then EOF.
	for _, b := range [][]byte{{1, 2, 3, 4, 5}, rawFrame(uint16(agentproto.OpHello), 1, 1000, []byte{4, 0, 0, 0})} {
		r := dialRaw(t, pid)
		r.send(b)
		r.c.CloseWrite()
		if !r.closedByAgent() {
			t.Fatalf("truncated frame %x: connection not closed", b)
		}
	}
	// Unknown and truncated requests: one error reply each, no second
	// (empty) reply after it.
	r = dialRaw(t, pid)
	if st := r.reply(uint16(agentproto.OpList), 5, []byte{1, 0, 0, 0}); st != 1 {
		t.Fatalf("list before hello: status %d, want 1", st)
	}
	r.hello()
	req := uint32(10)
	for _, op := range []uint16{0, 0x7777, 0x41, 0xFFFF} {
		if st := r.reply(op, req, []byte("garbage")); st != 4 {
			t.Fatalf("unknown op %#x: status %d, want 4", op, st)
		}
		req += 2
	}
	for op := uint16(2); op < 24; op++ {
		for _, k := range []int{0, 3, 11} {
			if st := r.reply(op, req, []byte(strings.Repeat("\xff", k))); st < 0 || st > 5 {
				t.Fatalf("op %d with %d bytes: status %d", op, k, st)
			}
			req += 2
		}
	}
	// An fd that came with another request is not taken by a later
	// register-host that brought none.
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	if _, _, err := r.c.WriteMsgUnix(rawFrame(0x7777, req, 1, []byte{0}), syscall.UnixRights(int(null.Fd())), nil); err != nil {
		t.Fatal(err)
	}
	if _, greq, _, err := r.next(5 * time.Second); err != nil || greq != req {
		t.Fatalf("unknown op with an fd: request %d, %v", greq, err)
	}
	reg := make([]byte, 32)
	binary.LittleEndian.PutUint32(reg[12:], 1)
	binary.LittleEndian.PutUint64(reg[16:], 4096)
	if st := r.reply(uint16(agentproto.OpRegisterHost), req+2, reg); st != 1 {
		t.Fatalf("register-host without an fd after a frame that carried one: status %d, want 1", st)
	}

	// The whole fuzz client of the GPU check, when python3 is here.
	if py := testenv.Lookup("python3"); py != "" {
		out, err := exec.Command(py, fuzzScript, "fuzz", strconv.Itoa(pid)).CombinedOutput()
		if err != nil || !strings.Contains(string(out), ", 0 failed") {
			t.Fatalf("agent_fuzz.py fuzz: %v\n%s", err, out)
		}
		t.Logf("agent_fuzz.py:\n%s", out)
	} else if testenv.InCI() {
		t.Fatal("python3 not found: scripts/gpu/agent_fuzz.py is not tested")
	}
	stillServes(t, a, pid)
}

// A connection from another uid is refused, the refusal logged, and the
// agent goes on serving root and the application (case 10).
func TestOtherUIDRefusedAgentServes(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to connect as another user")
	}
	f := build(t)
	a := f.start(t)
	pid := a.cmd.Process.Pid
	nobody := &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}

	// The raw refusal: connected, then closed before any answer.
	exe, _ := os.Executable()
	cp := filepath.Join(f.dir, "client.test")
	data, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cp, data, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(cp)
	cmd.Env = append(os.Environ(), helperEnv+"=dial", "GPUBPF_TEST_PID="+strconv.Itoa(pid))
	cmd.SysProcAttr = nobody
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "DIALERR") {
		t.Fatalf("dial as uid 65534: %v\n%s", err, out)
	}
	// The GPU check's client, as that user (a python3 it may run).
	py := ""
	for _, p := range []string{"/usr/bin/python3", testenv.Lookup("python3")} {
		if p != "" && exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", p, "-c", "pass").Run() == nil {
			py = p
			break
		}
	}
	if py != "" {
		script := filepath.Join(f.dir, "agent_fuzz.py")
		src, err := os.ReadFile(fuzzScript)
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(script, src, 0o644)
		cmd := exec.Command(py, script, "refused", strconv.Itoa(pid))
		cmd.SysProcAttr = nobody
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), "REFUSED: ") {
			t.Fatalf("agent_fuzz.py refused as uid 65534: %v\n%s", err, out)
		}
		t.Logf("agent_fuzz.py refused: %s", out)
	} else if testenv.InCI() {
		t.Fatal("no python3 that uid 65534 may run: scripts/gpu/agent_fuzz.py refused is not tested")
	}
	stillServes(t, a, pid)
	a.in.Write([]byte("quit\n"))
	for range a.lines {
	}
	a.cmd.Wait()
	if !a.stderr.Has("refused a control connection from uid 65534") {
		t.Fatalf("refusal not logged; stderr: %q", a.stderr.String())
	}
}
