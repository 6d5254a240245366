// Package agentproto is the wire protocol between gpubpf tools and the
// in-process agent (libgpubpf-agent.so): length-prefixed little-endian
// frames over a Unix stream socket, documented in docs/agent-protocol.md.
//
// Decoding never trusts a length: every count and size is checked against
// the bytes actually present before anything is allocated, so arbitrary
// input yields an error, never a panic or an outsized allocation.
package agentproto

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Version is the protocol version this package speaks (sent in Hello).
// 3: launch words in ActivateRequest, OpClock. 5: OpLaunch, Hello.Direct
// and Hello.CUDAError. 8: SnapshotRequest.Flags. 9: Module.Device and
// Module.Primary, NoteLateTables. 10: OpKernelTimes. 11:
// RingDrainRequest.CopyFrom. 12: OpGraphs, NoteGraphs. 13: OpGraphStamps,
// launch word kind LaunchKindGraphSeq. 14: OpSanitize.
const Version = 14

// HeaderSize is the size of a frame header.
const HeaderSize = 12

// MaxFrame bounds a frame's payload, both directions.
const MaxFrame = 64 << 20

// Op identifies a request (and its reply) or a notification.
type Op uint16

// Operations. A reply carries the request's Op and request id.
const (
	OpHello          Op = 1
	OpList           Op = 2
	OpFetch          Op = 3
	OpGlobals        Op = 4
	OpLoad           Op = 5
	OpUnload         Op = 6
	OpAlloc          Op = 7
	OpFree           Op = 8
	OpMemset         Op = 9
	OpWrite          Op = 10
	OpRead           Op = 11
	OpRegisterHost   Op = 12
	OpUnregisterHost Op = 13
	OpSnapshot       Op = 14
	OpActivate       Op = 15
	OpDeactivate     Op = 16
	OpDetach         Op = 17
	OpStats          Op = 18
	OpContinue       Op = 19
	OpReleaseUnload  Op = 20
	OpDeviceReady    Op = 21
	OpRingDrain      Op = 22
	OpClock          Op = 23
	OpLaunch         Op = 24
	OpLaunchEvents   Op = 25
	OpKernelTimes    Op = 26 // version 10
	OpGraphs         Op = 27 // version 12
	OpGraphStamps    Op = 28 // version 13
	OpSanitize       Op = 29 // version 14

	// Notifications (request id 0), sent by the agent after Hello.
	NoteModuleLoaded Op = 0x40
	NoteProbeFailed  Op = 0x41
	NoteUnloading    Op = 0x42
	NoteDeviceUsed   Op = 0x43
	NoteLateTables   Op = 0x44 // version 9
	NoteGraphs       Op = 0x45 // version 12
)

var opNames = map[Op]string{
	OpHello: "hello", OpList: "list", OpFetch: "fetch", OpGlobals: "globals", OpLoad: "load",
	OpUnload: "unload", OpAlloc: "alloc", OpFree: "free", OpMemset: "memset", OpWrite: "write",
	OpRead: "read", OpRegisterHost: "register-host", OpUnregisterHost: "unregister-host",
	OpSnapshot: "snapshot", OpActivate: "activate", OpDeactivate: "deactivate", OpDetach: "detach",
	OpStats: "stats", OpContinue: "continue", NoteModuleLoaded: "module-loaded",
	NoteProbeFailed: "probe-failed", OpReleaseUnload: "release-unload", NoteUnloading: "unloading",
	OpDeviceReady: "device-ready", NoteDeviceUsed: "device-used", OpRingDrain: "ring-drain",
	OpClock: "clock", OpLaunch: "launch", OpLaunchEvents: "launch-events", NoteLateTables: "late-tables",
	OpKernelTimes: "kernel-times", OpGraphs: "graphs", NoteGraphs: "graphs-note",
	OpGraphStamps: "graph-stamps", OpSanitize: "sanitize",
}

func (o Op) String() string {
	if s, ok := opNames[o]; ok {
		return s
	}
	return fmt.Sprintf("op(%d)", uint16(o))
}

// Header is a frame header: payload length, op, flags (0), request id.
type Header struct {
	Len   uint32
	Op    Op
	Flags uint16
	Req   uint32
}

// ErrFrameTooLarge is returned for a frame whose length exceeds MaxFrame.
var ErrFrameTooLarge = errors.New("agent protocol: frame larger than 64 MiB")

// ParseHeader decodes a frame header.
func ParseHeader(b []byte) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, io.ErrUnexpectedEOF
	}
	h := Header{
		Len:   binary.LittleEndian.Uint32(b),
		Op:    Op(binary.LittleEndian.Uint16(b[4:])),
		Flags: binary.LittleEndian.Uint16(b[6:]),
		Req:   binary.LittleEndian.Uint32(b[8:]),
	}
	if h.Len > MaxFrame {
		return h, ErrFrameTooLarge
	}
	return h, nil
}

// AppendFrame appends a complete frame to dst.
func AppendFrame(dst []byte, op Op, req uint32, payload []byte) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(payload)))
	dst = binary.LittleEndian.AppendUint16(dst, uint16(op))
	dst = binary.LittleEndian.AppendUint16(dst, 0)
	dst = binary.LittleEndian.AppendUint32(dst, req)
	return append(dst, payload...)
}

// ReadFrame reads one frame. The payload is allocated only once its
// declared length has passed the MaxFrame check, and is read in chunks so
// that a lying length on a short stream costs little.
func ReadFrame(r io.Reader) (Header, []byte, error) {
	var hb [HeaderSize]byte
	if _, err := io.ReadFull(r, hb[:]); err != nil {
		return Header{}, nil, err
	}
	h, err := ParseHeader(hb[:])
	if err != nil {
		return h, nil, err
	}
	const chunk = 1 << 20
	var p []byte
	for uint32(len(p)) < h.Len {
		n := min(int(h.Len)-len(p), chunk)
		start := len(p)
		p = append(p, make([]byte, n)...)
		if _, err := io.ReadFull(r, p[start:]); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return h, nil, err
		}
	}
	return h, p, nil
}

// Encoder builds a payload.
type Encoder struct{ B []byte }

func (e *Encoder) U32(v uint32) { e.B = binary.LittleEndian.AppendUint32(e.B, v) }
func (e *Encoder) I32(v int32)  { e.U32(uint32(v)) }
func (e *Encoder) U64(v uint64) { e.B = binary.LittleEndian.AppendUint64(e.B, v) }
func (e *Encoder) Bool(v bool) {
	if v {
		e.U32(1)
	} else {
		e.U32(0)
	}
}
func (e *Encoder) Bytes(b []byte) { e.U32(uint32(len(b))); e.B = append(e.B, b...) }
func (e *Encoder) Str(s string)   { e.U32(uint32(len(s))); e.B = append(e.B, s...) }

// Decoder reads a payload; the first error sticks and later reads return
// zero values.
type Decoder struct {
	b   []byte
	off int
	err error
}

// NewDecoder decodes b.
func NewDecoder(b []byte) *Decoder { return &Decoder{b: b} }

// Err is the first decoding error.
func (d *Decoder) Err() error { return d.err }

// Remaining is the number of unread bytes.
func (d *Decoder) Remaining() int { return len(d.b) - d.off }

func (d *Decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("agent protocol: truncated or malformed %s at byte %d of %d", what, d.off, len(d.b))
	}
}

func (d *Decoder) take(n int, what string) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || d.Remaining() < n {
		d.fail(what)
		return nil
	}
	p := d.b[d.off : d.off+n]
	d.off += n
	return p
}

func (d *Decoder) U32() uint32 {
	p := d.take(4, "u32")
	if p == nil {
		return 0
	}
	return binary.LittleEndian.Uint32(p)
}
func (d *Decoder) I32() int32 { return int32(d.U32()) }
func (d *Decoder) U64() uint64 {
	p := d.take(8, "u64")
	if p == nil {
		return 0
	}
	return binary.LittleEndian.Uint64(p)
}
func (d *Decoder) Bool() bool { return d.U32() != 0 }

// Bytes returns a copy of a length-prefixed byte string.
func (d *Decoder) Bytes() []byte {
	n := d.U32()
	if d.err != nil {
		return nil
	}
	if uint64(n) > uint64(d.Remaining()) {
		d.fail("byte string")
		return nil
	}
	p := d.take(int(n), "byte string")
	return append([]byte(nil), p...)
}

// Str returns a length-prefixed string.
func (d *Decoder) Str() string {
	n := d.U32()
	if d.err != nil {
		return ""
	}
	if uint64(n) > uint64(d.Remaining()) {
		d.fail("string")
		return ""
	}
	return string(d.take(int(n), "string"))
}

// Count reads a list length and checks that count items of at least
// minItem bytes each can be present, so make() is bounded by the input.
func (d *Decoder) Count(minItem int) int {
	n := d.U32()
	if d.err != nil {
		return 0
	}
	if minItem < 1 {
		minItem = 1
	}
	if uint64(n)*uint64(minItem) > uint64(d.Remaining()) {
		d.fail("list")
		return 0
	}
	return int(n)
}

// Finish reports a decoding error, or trailing bytes.
func (d *Decoder) Finish() error {
	if d.err != nil {
		return d.err
	}
	if d.Remaining() != 0 {
		return fmt.Errorf("agent protocol: %d unexpected trailing bytes", d.Remaining())
	}
	return nil
}
