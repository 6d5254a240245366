package gpuevent_snoop

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"unsafe"
)

// Offsets in struct ges_event (bpf/gpuevent_snoop.h); eventSize is checked
// against the bpf2go type at init so the two cannot drift apart.
const (
	offTs      = 0
	offDur     = 8
	offPid     = 16
	offTid     = 20
	offCookie  = 24
	offRet     = 28
	offRegs    = 32
	offStk     = 80
	offOut     = 128
	offCfg     = 136
	offArgw    = 176
	offNargw   = 240
	offNstack  = 244
	offStack   = 248
	offComm    = 376
	offCaller2 = 392
	offIP      = 400
	offExe     = 408
	eventSize  = 416
	maxArgs    = 8
	maxStack   = 16
)

// struct ges_name_event: the record of a kernel-handle lookup.
const (
	offNameHandle = 16
	offNameAux    = 24
	offNameCaller = 32
	offName       = 40
	nameEventSize = 40 + 256
)

func init() {
	if s := unsafe.Sizeof(gpueventsnoopGesEvent{}); s != eventSize {
		panic(fmt.Sprintf("struct ges_event is %d bytes, decoder expects %d", s, eventSize))
	}
	if s := unsafe.Sizeof(gpueventsnoopGesNameEvent{}); s != nameEventSize {
		panic(fmt.Sprintf("struct ges_name_event is %d bytes, decoder expects %d", s, nameEventSize))
	}
}

// Lookup is what a kernel-handle lookup returned.
type Lookup struct {
	PID    uint32
	API    *API
	Ret    int32
	Handle uint64 // the CUkernel or CUfunction written to *arg0
	Parent uint64 // arg1: CUlibrary, CUmodule, or (cuKernelGetFunction) the CUkernel
	Name   string // mangled kernel name ("" for cuKernelGetFunction)
	Caller uint64 // return address: who looked the kernel up
}

// IsLookup tells a kernel-handle lookup record from an API call record.
func IsLookup(b []byte) bool { return len(b) == nameEventSize }

// DecodeLookup decodes a kernel-handle lookup record.
func DecodeLookup(b []byte, l *Lookup) error {
	if len(b) != nameEventSize {
		return fmt.Errorf("kernel-handle record of %d bytes, want %d", len(b), nameEventSize)
	}
	id := u32(b, 4) & 0xff
	if int(id) >= len(apis) || !apis[id].Lookup {
		return fmt.Errorf("kernel-handle record for API id %d, which is no lookup", id)
	}
	name := b[offName:]
	if i := bytes.IndexByte(name, 0); i >= 0 {
		name = name[:i]
	}
	*l = Lookup{
		PID: u32(b, 0), API: &apis[id], Ret: int32(u32(b, 8)),
		Handle: u64(b, offNameHandle), Parent: u64(b, offNameAux), Name: string(name),
		Caller: u64(b, offNameCaller),
	}
	return nil
}

// Event is one decoded call. Slices point into the Event's own arrays; an
// Event is reused by the reader, so consumers copy what they keep.
type Event struct {
	TS, Dur  uint64 // monotonic ns at entry; ns spent in the call
	PID, TID uint32
	API      *API
	APIID    uint8
	// EntryOnly: a launch reported from its entry alone (its return was
	// not taken): no return code or duration.
	EntryOnly bool
	Ret       int32
	comm      [16]byte
	CommLen   int

	Size   uint64 // bytes: allocation, copy, memset
	Ptr    uint64 // malloc result, free argument, memset target
	Dst    uint64
	Src    uint64
	Dir    uint64 // memcpy direction (cudaMemcpyKind)
	Value  uint64 // memset value
	Stream uint64
	Func   uint64 // launch: host stub (runtime) or CUfunction (driver); graph exec
	Grid   [3]uint32
	Block  [3]uint32
	Shmem  uint64
	Caller uint64 // return address in the calling code
	// Caller2 is the return address one frame up, valid only when the
	// caller keeps frame pointers (see ges_event.caller2).
	Caller2 uint64
	// IP is the probed function's address in the process and Obj the
	// index of the probed object (Attacher.Object), for naming addresses
	// without /proc/PID/maps.
	IP  uint64
	Obj int
	// ExeStart is where the executable's code was loaded (mm->start_code):
	// its load bias, for naming addresses in it once the process is gone.
	ExeStart uint64

	argw   [maxArgs]uint64
	NArgs  int
	stack  [maxStack]uint64
	NStack int
}

// Comm is the thread's name.
func (e *Event) Comm() []byte { return e.comm[:e.CommLen] }

// Args returns the kernel argument words copied with -a.
func (e *Event) Args() []uint64 { return e.argw[:e.NArgs] }

// Stack returns the user stack captured with -s.
func (e *Event) Stack() []uint64 { return e.stack[:e.NStack] }

// OK reports whether the call succeeded.
func (e *Event) OK() bool { return e.Ret == 0 }

func u64(b []byte, off int) uint64 { return binary.LittleEndian.Uint64(b[off:]) }
func u32(b []byte, off int) uint32 { return binary.LittleEndian.Uint32(b[off:]) }

// Decode fills e from one ring-buffer record.
func Decode(b []byte, e *Event) error {
	if len(b) < eventSize {
		return fmt.Errorf("short event record: %d bytes, want %d", len(b), eventSize)
	}
	id := u32(b, offCookie) & 0xff
	if int(id) >= len(apis) {
		return fmt.Errorf("event for unknown API id %d", id)
	}
	a := &apis[id]
	*e = Event{}
	e.TS, e.Dur = u64(b, offTs), u64(b, offDur)
	e.PID, e.TID = u32(b, offPid), u32(b, offTid)
	e.API, e.APIID = a, uint8(id)
	e.Ret = int32(u32(b, offRet))
	e.EntryOnly = u32(b, offCookie)&cEntryOnly != 0
	copy(e.comm[:], b[offComm:offComm+16])
	for e.CommLen < 16 && e.comm[e.CommLen] != 0 {
		e.CommLen++
	}
	reg := func(i int) uint64 { return u64(b, offRegs+8*i) }
	stk := func(i int) uint64 { return u64(b, offStk+8*i) }
	e.Caller = stk(0)
	e.Caller2 = u64(b, offCaller2)
	e.IP = u64(b, offIP)
	e.Obj = int(u32(b, offCookie) >> 24)
	e.ExeStart = u64(b, offExe)
	if a.Stream >= 0 {
		e.Stream = reg(int(a.Stream))
	}
	switch a.Layout {
	case lAlloc:
		e.Size = reg(1)
		if e.Ret == 0 {
			e.Ptr = u64(b, offOut)
		}
	case lFree:
		e.Ptr = reg(0)
	case lMemcpyRT:
		e.Dst, e.Src, e.Size, e.Dir = reg(0), reg(1), reg(2), reg(3)
	case lMemcpyDrv:
		e.Dst, e.Src, e.Size, e.Dir = reg(0), reg(1), reg(2), uint64(a.Dir)
	case lMemset:
		e.Ptr, e.Value, e.Size = reg(0), reg(1)&0xffffffff, reg(2)
	case lLaunchRT:
		// dim3 (12 bytes) by value: x,y in one register, z in the next.
		e.Func = reg(0)
		e.Grid = [3]uint32{uint32(reg(1)), uint32(reg(1) >> 32), uint32(reg(2))}
		e.Block = [3]uint32{uint32(reg(3)), uint32(reg(3) >> 32), uint32(reg(4))}
		e.Shmem, e.Stream = stk(1), stk(2)
	case lLaunchDrv:
		e.Func = reg(0)
		e.Grid = [3]uint32{uint32(reg(1)), uint32(reg(2)), uint32(reg(3))}
		e.Block = [3]uint32{uint32(reg(4)), uint32(reg(5)), uint32(stk(1))}
		e.Shmem, e.Stream = uint64(uint32(stk(2))), stk(3)
	case lLaunchEx:
		// CUlaunchConfig: gridDimX..Z, blockDimX..Z, sharedMemBytes (u32), hStream at 32.
		c := func(i int) uint64 { return u64(b, offCfg+8*i) }
		e.Func = reg(1)
		e.Grid = [3]uint32{uint32(c(0)), uint32(c(0) >> 32), uint32(c(1))}
		e.Block = [3]uint32{uint32(c(1) >> 32), uint32(c(2)), uint32(c(2) >> 32)}
		e.Shmem, e.Stream = uint64(uint32(c(3))), c(4)
	case lLaunchExRT:
		// cudaLaunchConfig_t: dim3 gridDim, dim3 blockDim, size_t
		// dynamicSmemBytes at 24, cudaStream_t stream at 32.
		c := func(i int) uint64 { return u64(b, offCfg+8*i) }
		e.Func = reg(1)
		e.Grid = [3]uint32{uint32(c(0)), uint32(c(0) >> 32), uint32(c(1))}
		e.Block = [3]uint32{uint32(c(1) >> 32), uint32(c(2)), uint32(c(2) >> 32)}
		e.Shmem, e.Stream = c(3), c(4)
	case lGraph:
		e.Func = reg(0)
	}
	if n := int(u32(b, offNargw)); n > 0 {
		e.NArgs = min(n, maxArgs)
		for i := 0; i < e.NArgs; i++ {
			e.argw[i] = u64(b, offArgw+8*i)
		}
	}
	if n := int(int32(u32(b, offNstack))); n > 0 {
		e.NStack = min(n/8, maxStack)
		for i := 0; i < e.NStack; i++ {
			e.stack[i] = u64(b, offStack+8*i)
		}
	}
	return nil
}
