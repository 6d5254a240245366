package agentclient

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpubpf/gpubpf/pkg/runtime/agentproto"
)

// ringFixture is one device ring of N shards (fake CUDA: calloc'd memory
// in the app, reached through Write/Read) and its host mirror (a registered
// memfd), laid out as gpumap's RingBuf: N control blocks, then each shard's
// S data and T tail bytes.
type ringFixture struct {
	t        *testing.T
	c        *Conn
	ring     uint64
	regionID uint64
	mirror   *os.File
	N, S, T  uint64
}

const ringCtrl = 256

func newRingFixture(t *testing.T, c *Conn, N, S, T uint64) *ringFixture {
	t.Helper()
	size := N * (ringCtrl + S + T)
	ring, err := c.Alloc(OnDevice(0), size)
	if err != nil {
		t.Fatal(err)
	}
	mf := newMemfd(t, size)
	reg, err := c.RegisterMemfd(OnDevice(0), mf, size, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := &ringFixture{t: t, c: c, ring: ring, regionID: reg.RegionID, mirror: mf, N: N, S: S, T: T}
	for i := range N {
		var cb [ringCtrl]byte
		binary.LittleEndian.PutUint32(cb[20:], uint32(S))
		binary.LittleEndian.PutUint64(cb[24:], 7+i)   // dropped
		binary.LittleEndian.PutUint64(cb[32:], 123+i) // records
		binary.LittleEndian.PutUint32(cb[40:], uint32(T))
		binary.LittleEndian.PutUint32(cb[44:], uint32(N))
		binary.LittleEndian.PutUint64(cb[192:], 0xc1a1)
		f.write(f.ctl(i), cb[:])
	}
	return f
}

func newMemfd(t *testing.T, size uint64) *os.File {
	t.Helper()
	fd, err := unix.MemfdCreate("gpubpf-ring-test", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "memfd")
	t.Cleanup(func() { f.Close() })
	if err := f.Truncate(int64(size)); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *ringFixture) ctl(i uint64) uint64     { return f.ring + i*ringCtrl }
func (f *ringFixture) dataOff(i uint64) uint64 { return f.N*ringCtrl + i*(f.S+f.T) }

func (f *ringFixture) write(addr uint64, b []byte) {
	f.t.Helper()
	if err := f.c.Write(OnDevice(0), addr, b); err != nil {
		f.t.Fatal(err)
	}
}

func (f *ringFixture) read(addr uint64, n int) []byte {
	f.t.Helper()
	b, err := f.c.Read(OnDevice(0), addr, uint32(n))
	if err != nil {
		f.t.Fatal(err)
	}
	return b
}

// setReserved is what the GPU's atomics do: advance shard i's R (offset 64).
func (f *ringFixture) setReserved(i, r uint64) {
	f.write(f.ctl(i)+64, binary.LittleEndian.AppendUint64(nil, r))
}

// produce writes a recognisable pattern into shard i's physical data bytes
// [a, b) (b may run on into the tail).
func (f *ringFixture) produce(i, a, b uint64, seed byte) {
	p := make([]byte, b-a)
	for k := range p {
		p[k] = seed + byte(k%97) + 1 // never 0
	}
	f.write(f.ring+f.dataOff(i)+a, p)
}

func (f *ringFixture) drain(flags uint32, release ...uint64) uint64 {
	f.t.Helper()
	t0 := agentproto.MonoNow()
	rep, err := f.c.RingDrain(OnDevice(0), agentproto.RingDrainRequest{Ring: f.ring, RegionID: f.regionID,
		DataBytes: f.S, TailBytes: f.T, Flags: flags, Release: release})
	t1 := agentproto.MonoNow()
	if err != nil {
		f.t.Fatalf("drain releasing %v, flags %d: %v", release, flags, err)
	}
	// The agent's clock readings lie inside the round trip: a tool splits
	// a drain's time into socket and agent with them.
	if !(t0 <= rep.RecvNs && rep.RecvNs <= rep.SentNs && rep.SentNs <= t1) || rep.OpNs > rep.SentNs-rep.RecvNs ||
		rep.ReadyNs == 0 || rep.ReadyNs > rep.RecvNs {
		f.t.Fatalf("drain timestamps: tool %d..%d, agent ready %d, received %d, sent %d, op %d ns", t0, t1, rep.ReadyNs, rep.RecvNs, rep.SentNs, rep.OpNs)
	}
	return rep.Copied
}

func (f *ringFixture) readMirror(off, n uint64) []byte {
	f.t.Helper()
	b := make([]byte, n)
	if _, err := f.mirror.ReadAt(b, int64(off)); err != nil {
		f.t.Fatal(err)
	}
	return b
}

// mirrorData is shard i's data area in the mirror (S + T bytes).
func (f *ringFixture) mirrorData(i uint64) []byte { return f.readMirror(f.dataOff(i), f.S+f.T) }

func (f *ringFixture) deviceData(i uint64) []byte {
	return f.read(f.ring+f.dataOff(i), int(f.S+f.T))
}

// checkCtrl: the mirror's control block of shard i is the device's, with R
// and Rel.
func (f *ringFixture) checkCtrl(i, reserved, released uint64) {
	f.t.Helper()
	dev := f.read(f.ctl(i), ringCtrl)
	if got := binary.LittleEndian.Uint64(dev[128:]); got != released {
		f.t.Fatalf("shard %d: Rel at +128 = %d, want %d", i, got, released)
	}
	m := f.readMirror(i*ringCtrl, ringCtrl)
	if !bytes.Equal(m, dev) {
		f.t.Fatalf("shard %d: mirror control block differs from the device's:\n%x\n%x", i, m, dev)
	}
	if binary.LittleEndian.Uint64(m[64:]) != reserved || binary.LittleEndian.Uint32(m[20:]) != uint32(f.S) ||
		binary.LittleEndian.Uint64(m[32:]) != 123+i || binary.LittleEndian.Uint64(m[192:]) != 0xc1a1 {
		f.t.Fatalf("shard %d: mirror control block fields: %x", i, m)
	}
}

func isZero(b []byte) bool { return len(bytes.Trim(b, "\x00")) == 0 }

func dialAgent(t *testing.T, env ...string) *Conn {
	t.Helper()
	_, c := build(t).startDialed(t, env...)
	return c
}

// Drains of a one-shard device ring: the data of [release, R) lands at its
// physical offset in the mirror, a wrapping range copies through the tail
// and then from the start, nothing outside it is copied, device data is
// never touched, Rel is published at +128 only when it moved, and the
// control block is mirrored every time.
func TestRingDrain(t *testing.T) {
	c := dialAgent(t)
	const S, T = 4096, 256
	r := newRingFixture(t, c, 1, S, T)

	// 1. The GPU produced [0, 1000). Nothing released yet: no Rel write.
	r.produce(0, 0, 1000, 0)
	r.setReserved(0, 1000)
	if got := r.drain(0, 0); got != 1000 {
		t.Fatalf("copied %d bytes, want 1000", got)
	}
	r.checkCtrl(0, 1000, 0)
	dev, m := r.deviceData(0), r.mirrorData(0)
	if !bytes.Equal(m[:1000], dev[:1000]) || isZero(m[:1000]) || !isZero(m[1000:]) {
		t.Fatalf("mirror after a drain of [0, 1000) wrong")
	}

	// 2. Release [0, 1000); the GPU produced [1000, 3000) meanwhile and
	// rewrote [500, 1000) (released space it may reuse).
	r.produce(0, 1000, 3000, 10)
	r.produce(0, 500, 1000, 60)
	r.setReserved(0, 3000)
	if got := r.drain(0, 1000); got != 2000 {
		t.Fatalf("copied %d bytes, want 2000", got)
	}
	r.checkCtrl(0, 3000, 1000)
	dev2, m := r.deviceData(0), r.mirrorData(0)
	if isZero(dev2[:1000]) {
		t.Fatal("released device data was zeroed")
	}
	if isZero(m[1000:3000]) || !bytes.Equal(m[1000:3000], dev2[1000:3000]) {
		t.Fatal("positions [1000, 3000) not copied")
	}
	if !bytes.Equal(m[500:1000], dev[500:1000]) {
		t.Fatal("released positions [500, 1000) were copied again")
	}

	// 3. The GPU produced [3000, 4596): a record from 4000 ran on into the
	// tail up to position 4130 (tail bytes [4096, 4130)), then records
	// from 4130 (physical 34) to 4596 (physical 500).
	r.produce(0, 3000, S+34, 20)
	r.produce(0, 34, 500, 30)
	r.setReserved(0, S+500)
	if got := r.drain(0, 3000); got != S+T-3000+500 {
		t.Fatalf("copied %d bytes, want %d", got, S+T-3000+500)
	}
	r.checkCtrl(0, S+500, 3000)
	dev, m = r.deviceData(0), r.mirrorData(0)
	if !bytes.Equal(m[3000:], dev[3000:]) || isZero(m[S:S+34]) {
		t.Fatal("wrapping drain: [3000, S+T) (through the tail) not copied")
	}
	if !bytes.Equal(m[:500], dev[:500]) || isZero(m[34:500]) {
		t.Fatal("wrapping drain: [0, 500) not copied")
	}

	// 3b. The tool still reads [3000, S+300) in the mirror (handed out in
	// place, not released): a drain releasing only up to 3000 but copying
	// from S+300 leaves those bytes as they are, though the device's
	// changed, and copies [S+300, S+500) again.
	r.produce(0, 3000, S, 40)
	r.produce(0, 0, 500, 50)
	before := r.mirrorData(0)
	rep, err := r.c.RingDrain(OnDevice(0), agentproto.RingDrainRequest{Ring: r.ring, RegionID: r.regionID,
		DataBytes: S, TailBytes: T, Release: []uint64{3000}, CopyFrom: []uint64{S + 300}})
	if err != nil || rep.Copied != 200 {
		t.Fatalf("drain copying from S+300: %d bytes, %v; want 200", rep.Copied, err)
	}
	dev, m = r.deviceData(0), r.mirrorData(0)
	if !bytes.Equal(m[300:500], dev[300:500]) || bytes.Equal(m[300:500], before[300:500]) {
		t.Fatal("[S+300, S+500) not copied")
	}
	if !bytes.Equal(m[:300], before[:300]) || !bytes.Equal(m[3000:], before[3000:]) {
		t.Fatal("the copy wrote where the tool still reads, before its copy start")
	}

	// 4. Release everything: R == release, nothing to copy; a drain that
	// releases nothing new writes nothing but mirrors the control block.
	if got := r.drain(0, S+500); got != 0 {
		t.Fatalf("copied %d bytes with nothing new", got)
	}
	r.checkCtrl(0, S+500, S+500)
	if got := r.drain(0, S+500); got != 0 {
		t.Fatalf("copied %d", got)
	}
	r.checkCtrl(0, S+500, S+500)
}

// A ring of four shards: one round trip publishes the shards' releases
// that moved, mirrors every control block and copies each shard's new data
// into its own place; the same whether the copies go to the driver in one
// batch (cuMemcpyBatchAsync), one call each (a driver without it), or one
// call each after the driver refused a batch.
func TestRingDrainShards(t *testing.T) {
	for _, tc := range []struct{ name, env, log string }{
		{"batch", "", "ring drains batch their copies"},
		{"no batch", "GPUBPF_AGENT_DRAIN_BATCH=0", ""},
		{"batch refused", "FAKECUDA_BATCH_FAIL=1", "one call per copy from now on"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := []string{"GPUBPF_AGENT_DEBUG=1"}
			if tc.env != "" {
				env = append(env, tc.env)
			}
			a, c := build(t).startDialed(t, env...)
			testRingDrainShards(t, c)
			c.Close()
			a.cmd.Process.Kill()
			a.cmd.Wait()
			log := a.stderr.String()
			if tc.log != "" && !strings.Contains(log, tc.log) {
				t.Errorf("the agent's log has no %q:\n%s", tc.log, log)
			}
			if tc.log == "" && strings.Contains(log, "cuMemcpyBatchAsync") {
				t.Errorf("batched with GPUBPF_AGENT_DRAIN_BATCH=0:\n%s", log)
			}
		})
	}
}

func testRingDrainShards(t *testing.T, c *Conn) {
	const N, S, T = 4, 4096, 64
	r := newRingFixture(t, c, N, S, T)
	r.produce(0, 0, 800, 1)
	r.setReserved(0, 800)
	r.produce(2, 0, 2000, 2)
	r.setReserved(2, 2000)
	r.produce(3, 0, 100, 3)
	r.setReserved(3, 100)
	if got := r.drain(0, 0, 0, 0, 0); got != 2900 {
		t.Fatalf("copied %d bytes, want 2900", got)
	}
	for i, want := range []uint64{800, 0, 2000, 100} {
		r.checkCtrl(uint64(i), want, 0)
		dev, m := r.deviceData(uint64(i)), r.mirrorData(uint64(i))
		if !bytes.Equal(m[:want], dev[:want]) || !isZero(m[want:]) {
			t.Fatalf("shard %d: mirror data wrong after the first drain", i)
		}
	}
	// Shard 2 wraps; shard 0 releases what it had; shard 3 releases
	// nothing, so its 100 bytes are copied again (the tool consumes a
	// record only from a second copy).
	r.produce(2, 2000, S+T, 4)
	r.produce(2, 0, 300, 5)
	r.setReserved(2, S+300)
	if got := r.drain(0, 800, 0, 2000, 0); got != S+T-2000+300+100 {
		t.Fatalf("copied %d bytes, want %d", got, S+T-2000+300+100)
	}
	r.checkCtrl(0, 800, 800)
	r.checkCtrl(1, 0, 0)
	r.checkCtrl(2, S+300, 2000)
	r.checkCtrl(3, 100, 0)
	dev, m := r.deviceData(2), r.mirrorData(2)
	if !bytes.Equal(m, dev) {
		t.Fatal("shard 2: wrapping copy wrong")
	}
}

// RingDrainHostData: the data lives in the mirror itself, so nothing is
// copied; Rel is still written and the control blocks mirrored.
func TestRingDrainHostData(t *testing.T) {
	c := dialAgent(t)
	const N, S, T = 2, 8192, 64
	r := newRingFixture(t, c, N, S, T)
	r.produce(1, 0, S+T, 50)
	marker := bytes.Repeat([]byte{0xee}, S+T)
	if _, err := r.mirror.WriteAt(marker, int64(r.dataOff(1))); err != nil {
		t.Fatal(err)
	}
	r.setReserved(1, S+300)
	r.drain(agentproto.RingDrainHostData, 0, 0)
	r.checkCtrl(1, S+300, 0)
	if got := r.drain(agentproto.RingDrainHostData, 0, S-50); got != 0 {
		t.Fatalf("copied %d bytes with host data", got)
	}
	r.checkCtrl(1, S+300, S-50)
	if !bytes.Equal(r.mirrorData(1), marker) {
		t.Fatal("drain copied data into the mirror")
	}
}

// Bad requests are answered with status 1, touch nothing, and the session
// goes on.
func TestRingDrainBadRequest(t *testing.T) {
	c := dialAgent(t)
	const S, T = 4096, 64
	r := newRingFixture(t, c, 2, S, T)
	r.setReserved(0, 40)
	r.drain(0, 0, 0) // the mirror now shows R = 40 for shard 0
	small := newMemfd(t, 4096)
	sreg, err := c.RegisterMemfd(OnDevice(0), small, 4096, 0)
	if err != nil {
		t.Fatal(err)
	}
	ok := agentproto.RingDrainRequest{Ring: r.ring, RegionID: r.regionID, DataBytes: S, TailBytes: T, Release: []uint64{16, 0}}
	for _, tc := range []struct {
		name string
		mod  func(*agentproto.RingDrainRequest)
		want string
	}{
		{"S not a power of two", func(q *agentproto.RingDrainRequest) { q.DataBytes = 3 << 11 }, "power of two"},
		{"S too small", func(q *agentproto.RingDrainRequest) { q.DataBytes = 2048 }, "power of two"},
		{"T not a multiple of 8", func(q *agentproto.RingDrainRequest) { q.TailBytes = 12 }, "multiple of 8"},
		{"region too small", func(q *agentproto.RingDrainRequest) { q.RegionID = sreg.RegionID }, "the ring needs"},
		{"ring larger than its region", func(q *agentproto.RingDrainRequest) { q.DataBytes = 1 << 20 }, "the ring needs"},
		{"more shards than the region", func(q *agentproto.RingDrainRequest) { q.Release = []uint64{16, 0, 0, 0} }, "the ring needs"},
		{"shards not a power of two", func(q *agentproto.RingDrainRequest) { q.Release = []uint64{16, 0, 0} }, "shards"},
		{"no shards", func(q *agentproto.RingDrainRequest) { q.Release = nil }, "shards"},
		{"no such region", func(q *agentproto.RingDrainRequest) { q.RegionID = 1 << 40 }, "no region"},
		{"release past reserved", func(q *agentproto.RingDrainRequest) { q.Release = []uint64{41, 0} }, "release"},
		{"release past reserved, shard 1", func(q *agentproto.RingDrainRequest) { q.Release = []uint64{16, 8} }, "shard 1"},
		{"unknown flags", func(q *agentproto.RingDrainRequest) { q.Flags = 2 }, "flags"},
		{"copy start before the release", func(q *agentproto.RingDrainRequest) { q.CopyFrom = []uint64{8, 0} }, "copy start"},
		{"copy start past reserved", func(q *agentproto.RingDrainRequest) { q.CopyFrom = []uint64{48, 0} }, "copy start"},
		{"copy starts for fewer shards", func(q *agentproto.RingDrainRequest) { q.CopyFrom = []uint64{16} }, "copy starts"},
		{"no ring", func(q *agentproto.RingDrainRequest) { q.Ring = 0 }, "ring address"},
	} {
		q := ok
		tc.mod(&q)
		_, err := c.RingDrain(OnDevice(0), q)
		var ae *agentproto.Error
		if !errors.As(err, &ae) || ae.Status != agentproto.StatusBadRequest || !strings.Contains(ae.Message, tc.want) {
			t.Errorf("%s: got %v, want status %d with %q", tc.name, err, agentproto.StatusBadRequest, tc.want)
		}
	}
	// Nothing was touched, and the session still works.
	if b := r.read(r.ctl(0)+128, 8); !isZero(b) {
		t.Fatalf("a refused drain wrote Rel: %x", b)
	}
	if _, err := c.RingDrain(OnDevice(0), ok); err != nil {
		t.Fatalf("good drain after bad ones: %v", err)
	}
	r.checkCtrl(0, 40, 16)
	// A released position never moves back.
	q := ok
	q.Release = []uint64{8, 0}
	if _, err := c.RingDrain(OnDevice(0), q); err == nil || !strings.Contains(err.Error(), "must be in") {
		t.Fatalf("release moving back: %v", err)
	}
}
