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

// ringFixture is one device ring (fake CUDA: calloc'd memory in the app,
// reached through Write/Read) and its host mirror (a registered memfd).
type ringFixture struct {
	t        *testing.T
	c        *Conn
	ring     uint64
	regionID uint64
	mirror   *os.File
	S, T     uint64
}

const ringCtrl = 256

func newRingFixture(t *testing.T, c *Conn, S, T uint64) *ringFixture {
	t.Helper()
	ring, err := c.Alloc(OnDevice(0), ringCtrl+S+T)
	if err != nil {
		t.Fatal(err)
	}
	mf := newMemfd(t, ringCtrl+S+T)
	reg, err := c.RegisterMemfd(OnDevice(0), mf, ringCtrl+S+T, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := &ringFixture{t: t, c: c, ring: ring, regionID: reg.RegionID, mirror: mf, S: S, T: T}
	var cb [ringCtrl]byte
	binary.LittleEndian.PutUint32(cb[20:], uint32(S))
	binary.LittleEndian.PutUint64(cb[24:], 7)   // dropped
	binary.LittleEndian.PutUint64(cb[32:], 123) // produced
	binary.LittleEndian.PutUint32(cb[40:], uint32(T))
	binary.LittleEndian.PutUint64(cb[192:], 0xc1a1)
	f.write(ring, cb[:])
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

// setReserved is what the GPU's atomics do: advance R (offset 64).
func (f *ringFixture) setReserved(r uint64) {
	f.write(f.ring+64, binary.LittleEndian.AppendUint64(nil, r))
}

// produce writes a recognisable pattern into physical data bytes [a, b)
// (b may run on into the tail).
func (f *ringFixture) produce(a, b uint64, seed byte) {
	p := make([]byte, b-a)
	for i := range p {
		p[i] = seed + byte(i%97) + 1 // never 0
	}
	f.write(f.ring+ringCtrl+a, p)
}

func (f *ringFixture) drain(zeroFrom, release uint64, flags uint32) uint64 {
	f.t.Helper()
	r, err := f.c.RingDrain(OnDevice(0), agentproto.RingDrainRequest{Ring: f.ring, RegionID: f.regionID,
		DataBytes: f.S, TailBytes: f.T, ZeroFrom: zeroFrom, Release: release, Flags: flags})
	if err != nil {
		f.t.Fatalf("drain [%d, %d) flags %d: %v", zeroFrom, release, flags, err)
	}
	return r
}

// mirrorData is the mirror's data area (S + T bytes after the control block).
func (f *ringFixture) mirrorData() []byte {
	f.t.Helper()
	b := make([]byte, f.S+f.T)
	if _, err := f.mirror.ReadAt(b, ringCtrl); err != nil {
		f.t.Fatal(err)
	}
	return b
}

func (f *ringFixture) mirrorCtrl() []byte {
	f.t.Helper()
	b := make([]byte, ringCtrl)
	if _, err := f.mirror.ReadAt(b, 0); err != nil {
		f.t.Fatal(err)
	}
	return b
}

func (f *ringFixture) deviceData() []byte { return f.read(f.ring+ringCtrl, int(f.S+f.T)) }

// checkCtrl: the mirror's control block is the device's, with R and Rel.
func (f *ringFixture) checkCtrl(reserved, released uint64) {
	f.t.Helper()
	dev := f.read(f.ring, ringCtrl)
	if got := binary.LittleEndian.Uint64(dev[128:]); got != released {
		f.t.Fatalf("Rel at RING+128 = %d, want %d", got, released)
	}
	m := f.mirrorCtrl()
	if !bytes.Equal(m, dev) {
		f.t.Fatalf("mirror control block differs from the device's:\n%x\n%x", m, dev)
	}
	if binary.LittleEndian.Uint64(m[64:]) != reserved || binary.LittleEndian.Uint32(m[20:]) != uint32(f.S) ||
		binary.LittleEndian.Uint64(m[32:]) != 123 || binary.LittleEndian.Uint64(m[192:]) != 0xc1a1 {
		f.t.Fatalf("mirror control block fields: %x", m)
	}
}

func isZero(b []byte) bool { return len(bytes.Trim(b, "\x00")) == 0 }

// Drains of a device ring: the data of [release, R) lands at its physical
// offset in the mirror, wrapping ranges copy through the tail and then the
// start, released positions are zeroed on the device (never the tail), Rel
// is published at RING+128, and the control block is mirrored every time.
func TestRingDrain(t *testing.T) {
	f := build(t)
	a := f.start(t)
	c, err := Dial(a.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const S, T = 4096, 256
	r := newRingFixture(t, c, S, T)

	// 1. The GPU produced [0, 1000). Nothing released yet: no Rel write.
	r.produce(0, 1000, 0)
	r.setReserved(1000)
	if got := r.drain(0, 0, 0); got != 1000 {
		t.Fatalf("reserved %d, want 1000", got)
	}
	r.checkCtrl(1000, 0)
	dev, m := r.deviceData(), r.mirrorData()
	if !bytes.Equal(m[:1000], dev[:1000]) || isZero(m[:1000]) || !isZero(m[1000:]) {
		t.Fatalf("mirror after a drain of [0, 1000) wrong")
	}

	// 2. Release [0, 1000); the GPU produced [1000, 3000) meanwhile.
	r.produce(1000, 3000, 10)
	r.setReserved(3000)
	if got := r.drain(0, 1000, 0); got != 3000 {
		t.Fatalf("reserved %d, want 3000", got)
	}
	r.checkCtrl(3000, 1000)
	dev, m = r.deviceData(), r.mirrorData()
	if !isZero(dev[:1000]) {
		t.Fatal("released positions [0, 1000) not zeroed on the device")
	}
	if isZero(dev[1000:3000]) || !bytes.Equal(m[1000:3000], dev[1000:3000]) {
		t.Fatal("positions [1000, 3000) not copied (or zeroed)")
	}

	// 3. The GPU produced [3000, 4596): a record from 4000 ran on into the
	// tail up to position 4130 (tail bytes [4096, 4130)), then records
	// from 4130 (physical 34) to 4596 (physical 500).
	r.produce(3000, S+34, 20)
	r.produce(34, 500, 30)
	r.setReserved(S + 500)
	if got := r.drain(1000, 3000, 0); got != S+500 {
		t.Fatalf("reserved %d, want %d", got, S+500)
	}
	r.checkCtrl(S+500, 3000)
	dev, m = r.deviceData(), r.mirrorData()
	if !isZero(dev[1000:3000]) {
		t.Fatal("released positions [1000, 3000) not zeroed")
	}
	if !bytes.Equal(m[3000:], dev[3000:]) {
		t.Fatal("wrapping drain: [3000, S+T) (through the tail) not copied")
	}
	if isZero(m[S : S+34]) {
		t.Fatal("tail bytes not copied")
	}
	if !bytes.Equal(m[:500], dev[:500]) || isZero(m[34:500]) {
		t.Fatal("wrapping drain: [0, 500) not copied")
	}
	if isZero(m[500:1000]) { // still what drain 1 copied; the device has zeroed them since
		t.Fatal("mirror bytes outside [release, R) were copied")
	}

	// 4. Release a wrapping range [3000, 4596): zeroes [3000, S) and
	// [0, 500), keeps the tail. R == release: nothing to copy.
	tail := append([]byte(nil), dev[S:]...)
	if got := r.drain(3000, S+500, 0); got != S+500 {
		t.Fatalf("reserved %d", got)
	}
	r.checkCtrl(S+500, S+500)
	dev = r.deviceData()
	if !isZero(dev[:S]) {
		t.Fatal("wrapping release did not zero [3000, S) and [0, 500)")
	}
	if !bytes.Equal(dev[S:], tail) {
		t.Fatal("the tail was zeroed")
	}

	// 5. Releasing S bytes at once zeroes the whole data area (R behind
	// release: nothing copied).
	r.produce(0, S+T, 40)
	before := r.mirrorData()
	if got := r.drain(S+500, 2*S+500, 0); got != S+500 {
		t.Fatalf("reserved %d", got)
	}
	r.checkCtrl(S+500, 2*S+500)
	dev = r.deviceData()
	if !isZero(dev[:S]) || isZero(dev[S:]) {
		t.Fatal("a release of S bytes must zero the data area and keep the tail")
	}
	if !bytes.Equal(r.mirrorData(), before) {
		t.Fatal("data copied although R <= release")
	}

	// Nothing to do but read the control block: zero_from == release.
	if got := r.drain(2*S+500, 2*S+500, 0); got != S+500 {
		t.Fatalf("reserved %d", got)
	}
	r.checkCtrl(S+500, 2*S+500)
}

// Flags that leave released device data alone (Rel is still written and
// the control block mirrored): RingDrainHostData (the data lives in the
// mirror itself, so nothing is copied) and RingDrainNoZero (records carry
// position tags; new data is still copied).
func TestRingDrainFlags(t *testing.T) {
	f := build(t)
	a := f.start(t)
	c, err := Dial(a.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const S, T = 8192, 64
	for i, tc := range []struct {
		name   string
		flags  uint32
		copies bool
	}{
		{"host data", agentproto.RingDrainHostData, false},
		{"no zero", agentproto.RingDrainNoZero, true},
	} {
		r := newRingFixture(t, c, S, T)
		r.produce(0, S+T, byte(50+i))
		marker := bytes.Repeat([]byte{0xee}, S+T)
		if _, err := r.mirror.WriteAt(marker, ringCtrl); err != nil {
			t.Fatal(err)
		}
		r.setReserved(S + 300)
		devBefore := r.deviceData()
		if got := r.drain(100, S-50, tc.flags); got != S+300 {
			t.Fatalf("%s: reserved %d, want %d", tc.name, got, S+300)
		}
		r.checkCtrl(S+300, S-50)
		if !bytes.Equal(r.deviceData(), devBefore) {
			t.Fatalf("%s: drain zeroed device data", tc.name)
		}
		m, d := r.mirrorData(), r.deviceData()
		if !tc.copies {
			if !bytes.Equal(m, marker) {
				t.Fatalf("%s: drain copied data into the mirror", tc.name)
			}
			continue
		}
		if !bytes.Equal(m[S-50:S], d[S-50:S]) || !bytes.Equal(m[:300], d[:300]) {
			t.Fatalf("%s: drain did not copy the new data", tc.name)
		}
	}
}

// Bad requests are answered with status 1 and the session goes on.
func TestRingDrainBadRequest(t *testing.T) {
	f := build(t)
	a := f.start(t)
	c, err := Dial(a.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const S, T = 4096, 64
	r := newRingFixture(t, c, S, T)
	small := newMemfd(t, 4096)
	sreg, err := c.RegisterMemfd(OnDevice(0), small, 4096, 0)
	if err != nil {
		t.Fatal(err)
	}
	ok := agentproto.RingDrainRequest{Ring: r.ring, RegionID: r.regionID, DataBytes: S, TailBytes: T, ZeroFrom: 0, Release: 16}
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
		{"no such region", func(q *agentproto.RingDrainRequest) { q.RegionID = 1 << 40 }, "no region"},
		{"release before zero_from", func(q *agentproto.RingDrainRequest) { q.ZeroFrom = 17 }, "release"},
		{"release more than S", func(q *agentproto.RingDrainRequest) { q.Release = S + 1 }, "release"},
		{"unknown flags", func(q *agentproto.RingDrainRequest) { q.Flags = 4 }, "flags"},
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
	if b := r.read(r.ring+128, 8); !isZero(b) {
		t.Fatalf("a refused drain wrote Rel: %x", b)
	}
	r.setReserved(40)
	if got, err := c.RingDrain(OnDevice(0), ok); err != nil || got != 40 {
		t.Fatalf("good drain after bad ones: %d %v", got, err)
	}
	r.checkCtrl(40, 16)
}
