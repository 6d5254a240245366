// Package launchev is the tool's side of the agent's launch-event feed: a
// ring in a memfd that the agent maps (agentclient.Conn.LaunchEvents) and
// fills with one record per kernel launch the program makes, written by the
// launching thread itself with the driver's result and the call's duration
// (pkg/runtime/agent/events.c; layout in docs/agent-protocol.md, "Launch
// events"). One trap-free record replaces the uprobe hits a launch would
// otherwise cost.
//
// The program may scribble on the shared pages: the reader trusts nothing
// in them but a record whose sequence word is the one it waits for, and
// never takes a size or an index from the ring.
package launchev

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"os"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	magic      = 0x5645474c // "LGEV"
	version    = 1
	headerSize = 4096
	// RecordSize is the size of one record.
	RecordSize = 96

	offCap     = 8
	offHead    = 64
	offTail    = 128
	offDropped = 192
)

// API says which driver entry point a launch came through.
type API uint32

// The launch entry points, as the agent numbers them (events.c LEV_*).
const (
	LaunchKernel API = iota
	LaunchKernelPTSZ
	LaunchKernelEx
	LaunchKernelExPTSZ
	LaunchCooperativeKernel
	LaunchCooperativeKernelPTSZ
)

var apiNames = [...]string{"cuLaunchKernel", "cuLaunchKernel_ptsz", "cuLaunchKernelEx", "cuLaunchKernelEx_ptsz",
	"cuLaunchCooperativeKernel", "cuLaunchCooperativeKernel_ptsz"}

func (a API) String() string {
	if int(a) < len(apiNames) {
		return apiNames[a]
	}
	return fmt.Sprintf("launch API %d", uint32(a))
}

// Record is one launch.
type Record struct {
	TS       uint64 // CLOCK_MONOTONIC ns when the driver was called
	Dur      uint32 // ns the driver call took (saturated at ~4.3 s)
	TID      uint32
	Func     uint64 // CUfunction or CUkernel
	Grid     [3]uint32
	Block    [3]uint32
	Shmem    uint32
	Result   int32 // the driver's CUresult
	Stream   uint64
	Caller   uint64 // return address into the code that called the driver
	API      API
	Sequence uint64 // position in the feed: gaps never occur; drops are counted apart
}

// Ring is a launch-event ring; one reader.
type Ring struct {
	f    *os.File
	mem  []byte
	cap  uint64
	tail uint64
}

// New makes a ring of at least records records (rounded up to a power of
// two, at least 2).
func New(records int) (*Ring, error) {
	if records < 2 {
		records = 2
	}
	n := uint64(1) << bits.Len64(uint64(records-1))
	size := headerSize + n*RecordSize
	fd, err := unix.MemfdCreate("gpubpf-launch-events", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("creating the launch-event ring: %w", err)
	}
	f := os.NewFile(uintptr(fd), "gpubpf-launch-events")
	if err := f.Truncate(int64(size)); err != nil {
		f.Close()
		return nil, fmt.Errorf("sizing the launch-event ring to %d bytes: %w", size, err)
	}
	mem, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("mapping the launch-event ring: %w", err)
	}
	le := binary.LittleEndian
	le.PutUint32(mem[0:], magic)
	le.PutUint32(mem[4:], version)
	le.PutUint64(mem[offCap:], n)
	return &Ring{f: f, mem: mem, cap: n}, nil
}

// File is the memfd to send to the agent.
func (r *Ring) File() *os.File { return r.f }

// Size is the ring's size in bytes, as the agent is told.
func (r *Ring) Size() uint64 { return uint64(len(r.mem)) }

func (r *Ring) word64(off int) *uint64 { return (*uint64)(unsafe.Pointer(&r.mem[off])) }
func (r *Ring) word32(off int) *uint32 { return (*uint32)(unsafe.Pointer(&r.mem[off])) }

// Read hands fn each record published since the last Read, in order, and
// frees their slots; it returns how many. It stops at the first slot not
// yet published (a launching thread between its claim and its last store).
// fn must not keep rec.
func (r *Ring) Read(fn func(rec *Record)) int {
	le := binary.LittleEndian
	var rec Record
	n := 0
	for {
		off := headerSize + int(r.tail&(r.cap-1))*RecordSize
		if atomic.LoadUint32(r.word32(off+76)) != uint32(r.tail+1) {
			break
		}
		b := r.mem[off : off+RecordSize]
		rec = Record{
			TS: le.Uint64(b[0:]), Dur: le.Uint32(b[8:]), TID: le.Uint32(b[12:]), Func: le.Uint64(b[16:]),
			Grid:  [3]uint32{le.Uint32(b[24:]), le.Uint32(b[28:]), le.Uint32(b[32:])},
			Block: [3]uint32{le.Uint32(b[36:]), le.Uint32(b[40:]), le.Uint32(b[44:])},
			Shmem: le.Uint32(b[48:]), Result: int32(le.Uint32(b[52:])), Stream: le.Uint64(b[56:]),
			Caller: le.Uint64(b[64:]), API: API(le.Uint32(b[72:])), Sequence: r.tail,
		}
		r.tail++
		atomic.StoreUint64(r.word64(offTail), r.tail)
		fn(&rec)
		n++
	}
	return n
}

// Dropped is how many launches found the ring full (as the agent counts
// them in the shared header).
func (r *Ring) Dropped() uint64 { return atomic.LoadUint64(r.word64(offDropped)) }

// Claimed is how many records the program's threads have claimed so far
// (read and in flight), from the shared header.
func (r *Ring) Claimed() uint64 { return atomic.LoadUint64(r.word64(offHead)) }

// Close unmaps the ring and closes its memfd (the agent keeps its own
// mapping until it lets go).
func (r *Ring) Close() error {
	err := unix.Munmap(r.mem)
	if cerr := r.f.Close(); err == nil {
		err = cerr
	}
	return err
}
