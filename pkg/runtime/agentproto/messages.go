package agentproto

import "fmt"

// Message is a request, reply or notification payload.
type Message interface {
	Encode(e *Encoder)
	Decode(d *Decoder)
}

// Marshal encodes m as a payload.
func Marshal(m Message) []byte {
	var e Encoder
	m.Encode(&e)
	return e.B
}

// Unmarshal decodes a payload with no status word (requests, notifications).
func Unmarshal(p []byte, m Message) error {
	d := NewDecoder(p)
	m.Decode(d)
	return d.Finish()
}

// Reply status codes (first word of every reply).
const (
	StatusOK          = 0
	StatusBadRequest  = 1
	StatusNotFound    = 2
	StatusCUDA        = 3
	StatusUnsupported = 4
	StatusInternal    = 5
)

// Error is an error reply from the agent.
type Error struct {
	Op       Op
	Status   int32
	CUResult int32 // CUresult when Status is StatusCUDA, else usually 0
	Message  string
}

func (e *Error) Error() string {
	if e.CUResult != 0 {
		return fmt.Sprintf("agent %s: %s (CUresult %d)", e.Op, e.Message, e.CUResult)
	}
	return fmt.Sprintf("agent %s: %s", e.Op, e.Message)
}

// MarshalReply encodes a successful reply (status 0 then m).
func MarshalReply(m Message) []byte {
	var e Encoder
	e.I32(StatusOK)
	if m != nil {
		m.Encode(&e)
	}
	return e.B
}

// MarshalError encodes an error reply.
func MarshalError(status, cu int32, msg string) []byte {
	var e Encoder
	e.I32(status)
	e.I32(cu)
	e.Str(msg)
	return e.B
}

// UnmarshalReply decodes a reply to op into m (nil for replies without
// fields); an error reply comes back as *Error.
func UnmarshalReply(op Op, p []byte, m Message) error {
	d := NewDecoder(p)
	st := d.I32()
	if d.Err() != nil {
		return d.Err()
	}
	if st != StatusOK {
		e := &Error{Op: op, Status: st, CUResult: d.I32(), Message: d.Str()}
		if err := d.Finish(); err != nil {
			return err
		}
		return e
	}
	if m != nil {
		m.Decode(d)
	}
	return d.Finish()
}

// Empty is a payload with no fields.
type Empty struct{}

func (*Empty) Encode(*Encoder) {}
func (*Empty) Decode(*Decoder) {}

// HelloRequest opens a session. FlagHold asks the agent to hold each
// module load until this tool sends Continue for it (or a timeout).
type HelloRequest struct {
	Version uint32
	Flags   uint32
	Client  string
}

// Hello flags.
const FlagHold = 1

func (m *HelloRequest) Encode(e *Encoder) { e.U32(m.Version); e.U32(m.Flags); e.Str(m.Client) }
func (m *HelloRequest) Decode(d *Decoder) { m.Version = d.U32(); m.Flags = d.U32(); m.Client = d.Str() }

// Device is one CUDA device as the process sees it.
type Device struct {
	Ordinal      int32
	Name         string
	Major, Minor int32 // compute capability
}

// Hello describes the agent's process.
type Hello struct {
	Version       uint32
	PID, UID      uint32
	Exe           string
	AgentVersion  string
	DriverVersion int32  // cuDriverGetVersion, e.g. 13000; 0 before CUDA is initialised
	PTXISAMax     uint32 // highest PTX ISA the driver JITs, times ten (90 = 9.0)
	CUDAReady     bool
	Devices       []Device
	// DevicesUsed has bit i set when the application uses device i (has
	// retained its primary context): the devices where maps and clones of
	// context-independent modules belong. Later ones come as
	// NoteDeviceUsed.
	DevicesUsed uint64
	// Direct: the agent runs as a program of its own, the host process of
	// a direct run (no application; OpLaunch runs the tool's kernels).
	Direct bool
	// CUDAError says, in direct mode, why CUDA cannot be used (libcuda
	// missing, cuInit failed); "" otherwise.
	CUDAError string
}

func (m *Hello) Encode(e *Encoder) {
	e.U32(m.Version)
	e.U32(m.PID)
	e.U32(m.UID)
	e.Str(m.Exe)
	e.Str(m.AgentVersion)
	e.I32(m.DriverVersion)
	e.U32(m.PTXISAMax)
	e.Bool(m.CUDAReady)
	e.U32(uint32(len(m.Devices)))
	for _, v := range m.Devices {
		e.I32(v.Ordinal)
		e.Str(v.Name)
		e.I32(v.Major)
		e.I32(v.Minor)
	}
	e.U64(m.DevicesUsed)
	e.Bool(m.Direct)
	e.Str(m.CUDAError)
}

func (m *Hello) Decode(d *Decoder) {
	m.Version = d.U32()
	m.PID = d.U32()
	m.UID = d.U32()
	m.Exe = d.Str()
	m.AgentVersion = d.Str()
	m.DriverVersion = d.I32()
	m.PTXISAMax = d.U32()
	m.CUDAReady = d.Bool()
	n := d.Count(16)
	m.Devices = make([]Device, n)
	for i := range m.Devices {
		m.Devices[i] = Device{Ordinal: d.I32(), Name: d.Str(), Major: d.I32(), Minor: d.I32()}
	}
	m.DevicesUsed = d.U64()
	m.Direct = d.Bool()
	m.CUDAError = d.Str()
}

// Encode writes a device (NoteDeviceUsed's payload).
func (m *Device) Encode(e *Encoder) { e.I32(m.Ordinal); e.Str(m.Name); e.I32(m.Major); e.I32(m.Minor) }

// Decode reads a device.
func (m *Device) Decode(d *Decoder) {
	m.Ordinal, m.Name, m.Major, m.Minor = d.I32(), d.Str(), d.I32(), d.I32()
}

// DeviceRequest names a device by ordinal (DeviceReady).
type DeviceRequest struct{ Ordinal uint32 }

func (m *DeviceRequest) Encode(e *Encoder) { e.U32(m.Ordinal) }
func (m *DeviceRequest) Decode(d *Decoder) { m.Ordinal = d.U32() }

// ListRequest asks for the inventory. ListNoEnumerate skips asking the
// driver for kernels the application has not looked up yet.
type ListRequest struct{ Flags uint32 }

// List flags.
const ListNoEnumerate = 1

func (m *ListRequest) Encode(e *Encoder) { e.U32(m.Flags) }
func (m *ListRequest) Decode(d *Decoder) { m.Flags = d.U32() }

// ModuleKind says how a module was loaded.
type ModuleKind uint32

// Module kinds.
const (
	LibraryData   ModuleKind = 1 // cuLibraryLoadData (cudart's lazy loading)
	LibraryFile   ModuleKind = 2 // cuLibraryLoadFromFile
	ModuleData    ModuleKind = 3 // cuModuleLoadData(Ex)
	ModuleFile    ModuleKind = 4 // cuModuleLoad
	ModuleFatbin  ModuleKind = 5 // cuModuleLoadFatBinary
	moduleKindMax            = 5
)

func (k ModuleKind) String() string {
	switch k {
	case LibraryData:
		return "library"
	case LibraryFile:
		return "library-file"
	case ModuleData:
		return "module"
	case ModuleFile:
		return "module-file"
	case ModuleFatbin:
		return "module-fatbin"
	}
	return fmt.Sprintf("kind(%d)", uint32(k))
}

// IsLibrary reports whether the handle is a CUlibrary.
func (k ModuleKind) IsLibrary() bool { return k == LibraryData || k == LibraryFile }

// ImageFormat is what the module's image bytes are.
type ImageFormat uint32

// Image formats.
const (
	FormatUnknown ImageFormat = 0
	FormatFatbin  ImageFormat = 1 // fatbin container (magic 0xBA55ED50)
	FormatELF     ImageFormat = 2 // cubin
	FormatPTX     ImageFormat = 3
)

func (f ImageFormat) String() string {
	switch f {
	case FormatFatbin:
		return "fatbin"
	case FormatELF:
		return "cubin"
	case FormatPTX:
		return "ptx"
	}
	return "unknown"
}

// Module is one loaded module or library.
type Module struct {
	ID       uint64
	Kind     ModuleKind
	Handle   uint64 // CUlibrary or CUmodule
	Ctx      uint64 // CUcontext it was loaded in (modules only)
	Format   ImageFormat
	Size     uint64 // image size; 0 when not fetchable (file loads: see Path)
	Unloaded bool
	Path     string
	// Device is the ordinal of Ctx's device (-1 for libraries or when
	// unknown); Primary says Ctx is that device's primary context, the one
	// its libraries' kernels run in too (protocol 9).
	Device  int32
	Primary bool
}

func (m *Module) Encode(e *Encoder) {
	e.U64(m.ID)
	e.U32(uint32(m.Kind))
	e.U64(m.Handle)
	e.U64(m.Ctx)
	e.U32(uint32(m.Format))
	e.U64(m.Size)
	e.Bool(m.Unloaded)
	e.Str(m.Path)
	e.I32(m.Device)
	e.Bool(m.Primary)
}

func (m *Module) Decode(d *Decoder) {
	m.ID = d.U64()
	m.Kind = ModuleKind(d.U32())
	m.Handle = d.U64()
	m.Ctx = d.U64()
	m.Format = ImageFormat(d.U32())
	m.Size = d.U64()
	m.Unloaded = d.Bool()
	m.Path = d.Str()
	m.Device = d.I32()
	m.Primary = d.Bool()
}

const moduleMinSize = 8 + 4 + 8 + 8 + 4 + 8 + 4 + 4

// KernelKind says what a kernel handle is.
type KernelKind uint32

// Kernel handle kinds.
const (
	KindKernel   KernelKind = 1 // CUkernel (context-independent)
	KindFunction KernelKind = 2 // CUfunction (one context)
)

// Kernel is one kernel handle the application obtained (or the driver
// enumerated). Names are mangled.
type Kernel struct {
	Handle   uint64
	Kind     KernelKind
	ModuleID uint64
	Ctx      uint64 // CUfunction's context
	Parent   uint64 // CUkernel a CUfunction came from (cuKernelGetFunction)
	Name     string
}

func (k *Kernel) Encode(e *Encoder) {
	e.U64(k.Handle)
	e.U32(uint32(k.Kind))
	e.U64(k.ModuleID)
	e.U64(k.Ctx)
	e.U64(k.Parent)
	e.Str(k.Name)
}

func (k *Kernel) Decode(d *Decoder) {
	k.Handle = d.U64()
	k.Kind = KernelKind(d.U32())
	k.ModuleID = d.U64()
	k.Ctx = d.U64()
	k.Parent = d.U64()
	k.Name = d.Str()
}

const kernelMinSize = 8 + 4 + 8 + 8 + 8 + 4

// Inventory is the reply to List.
type Inventory struct {
	Modules []Module
	Kernels []Kernel
}

func (m *Inventory) Encode(e *Encoder) {
	e.U32(uint32(len(m.Modules)))
	for i := range m.Modules {
		m.Modules[i].Encode(e)
	}
	e.U32(uint32(len(m.Kernels)))
	for i := range m.Kernels {
		m.Kernels[i].Encode(e)
	}
}

func (m *Inventory) Decode(d *Decoder) {
	m.Modules = make([]Module, d.Count(moduleMinSize))
	for i := range m.Modules {
		m.Modules[i].Decode(d)
	}
	m.Kernels = make([]Kernel, d.Count(kernelMinSize))
	for i := range m.Kernels {
		m.Kernels[i].Decode(d)
	}
}

// FetchRequest reads part of a module's image.
type FetchRequest struct {
	ModuleID uint64
	Offset   uint64
	Max      uint32 // at most 16 MiB per request
}

func (m *FetchRequest) Encode(e *Encoder) { e.U64(m.ModuleID); e.U64(m.Offset); e.U32(m.Max) }
func (m *FetchRequest) Decode(d *Decoder) { m.ModuleID = d.U64(); m.Offset = d.U64(); m.Max = d.U32() }

// FetchReply is a chunk of an image.
type FetchReply struct {
	Total uint64
	Data  []byte
}

func (m *FetchReply) Encode(e *Encoder) { e.U64(m.Total); e.Bytes(m.Data) }
func (m *FetchReply) Decode(d *Decoder) { m.Total = d.U64(); m.Data = d.Bytes() }

// Target names the context driver calls run in: Ctx when non-zero, else
// the primary context of Device.
type Target struct {
	Device int32
	Ctx    uint64
}

func (t *Target) encode(e *Encoder) { e.I32(t.Device); e.U64(t.Ctx) }
func (t *Target) decode(d *Decoder) { t.Device = d.I32(); t.Ctx = d.U64() }

// GlobalsRequest asks for the device addresses of a module's globals.
type GlobalsRequest struct {
	ModuleID uint64
	Target
	Names []string
}

func (m *GlobalsRequest) Encode(e *Encoder) {
	e.U64(m.ModuleID)
	m.Target.encode(e)
	e.U32(uint32(len(m.Names)))
	for _, n := range m.Names {
		e.Str(n)
	}
}

func (m *GlobalsRequest) Decode(d *Decoder) {
	m.ModuleID = d.U64()
	m.Target.decode(d)
	m.Names = make([]string, d.Count(4))
	for i := range m.Names {
		m.Names[i] = d.Str()
	}
}

// Global is one global's address (CUResult != 0: not found).
type Global struct {
	Name     string
	CUResult int32
	Addr     uint64
	Size     uint64
}

// GlobalsReply answers GlobalsRequest in the same order.
type GlobalsReply struct{ Globals []Global }

func (m *GlobalsReply) Encode(e *Encoder) {
	e.U32(uint32(len(m.Globals)))
	for _, g := range m.Globals {
		e.Str(g.Name)
		e.I32(g.CUResult)
		e.U64(g.Addr)
		e.U64(g.Size)
	}
}

func (m *GlobalsReply) Decode(d *Decoder) {
	m.Globals = make([]Global, d.Count(24))
	for i := range m.Globals {
		m.Globals[i] = Global{Name: d.Str(), CUResult: d.I32(), Addr: d.U64(), Size: d.U64()}
	}
}

// LoadRequest loads instrumented PTX with the driver JIT.
type LoadRequest struct {
	Target
	PTX       []byte
	Functions []string // entries to resolve
}

func (m *LoadRequest) Encode(e *Encoder) {
	m.Target.encode(e)
	e.Bytes(m.PTX)
	e.U32(uint32(len(m.Functions)))
	for _, f := range m.Functions {
		e.Str(f)
	}
}

func (m *LoadRequest) Decode(d *Decoder) {
	m.Target.decode(d)
	m.PTX = d.Bytes()
	m.Functions = make([]string, d.Count(4))
	for i := range m.Functions {
		m.Functions[i] = d.Str()
	}
}

// Function is a resolved entry of a loaded clone.
type Function struct {
	Name   string
	Handle uint64 // CUfunction
}

// LoadReply describes a loaded clone module.
type LoadReply struct {
	CloneID   uint64
	Ctx       uint64
	LoadNanos uint64 // time spent in cuModuleLoadDataEx
	InfoLog   string
	Functions []Function
}

func (m *LoadReply) Encode(e *Encoder) {
	e.U64(m.CloneID)
	e.U64(m.Ctx)
	e.U64(m.LoadNanos)
	e.Str(m.InfoLog)
	e.U32(uint32(len(m.Functions)))
	for _, f := range m.Functions {
		e.Str(f.Name)
		e.U64(f.Handle)
	}
}

func (m *LoadReply) Decode(d *Decoder) {
	m.CloneID = d.U64()
	m.Ctx = d.U64()
	m.LoadNanos = d.U64()
	m.InfoLog = d.Str()
	m.Functions = make([]Function, d.Count(12))
	for i := range m.Functions {
		m.Functions[i] = Function{Name: d.Str(), Handle: d.U64()}
	}
}

// IDRequest carries one id (Unload: clone id; UnregisterHost: region id;
// Continue: module id; Deactivate: kernel handle, 0 = all).
type IDRequest struct{ ID uint64 }

func (m *IDRequest) Encode(e *Encoder) { e.U64(m.ID) }
func (m *IDRequest) Decode(d *Decoder) { m.ID = d.U64() }

// LaunchEventsRequest hands the agent a launch-event ring (the fd sent with
// it, Size bytes: docs/agent-protocol.md "Launch events"); Size 0 stops.
type LaunchEventsRequest struct{ Size uint64 }

func (m *LaunchEventsRequest) Encode(e *Encoder) { e.U64(m.Size) }
func (m *LaunchEventsRequest) Decode(d *Decoder) { m.Size = d.U64() }

// LaunchEventsReply (protocol 7) answers a LaunchEventsRequest that starts
// the events: AttachNs is the agent's CLOCK_MONOTONIC read right after it
// turned the events on. Every launch whose wrapper started at or after it
// is in the ring; a tool that saw launches some other way until then (its
// own uprobes) uses it to report each launch once. 0 from an older agent.
type LaunchEventsReply struct{ AttachNs uint64 }

func (m *LaunchEventsReply) Encode(e *Encoder) { e.U64(m.AttachNs) }
func (m *LaunchEventsReply) Decode(d *Decoder) {
	if d.Remaining() >= 8 {
		m.AttachNs = d.U64()
	}
}

// AllocRequest allocates zeroed device memory.
type AllocRequest struct {
	Target
	Size uint64
}

func (m *AllocRequest) Encode(e *Encoder) { m.Target.encode(e); e.U64(m.Size) }
func (m *AllocRequest) Decode(d *Decoder) { m.Target.decode(d); m.Size = d.U64() }

// AddrReply carries a device address.
type AddrReply struct{ Addr uint64 }

func (m *AddrReply) Encode(e *Encoder) { e.U64(m.Addr) }
func (m *AddrReply) Decode(d *Decoder) { m.Addr = d.U64() }

// FreeRequest frees memory from Alloc.
type FreeRequest struct {
	Target
	Addr uint64
}

func (m *FreeRequest) Encode(e *Encoder) { m.Target.encode(e); e.U64(m.Addr) }
func (m *FreeRequest) Decode(d *Decoder) { m.Target.decode(d); m.Addr = d.U64() }

// MemsetRequest sets Size bytes at Addr to Value.
type MemsetRequest struct {
	Target
	Addr  uint64
	Value uint32
	Size  uint64
}

func (m *MemsetRequest) Encode(e *Encoder) {
	m.Target.encode(e)
	e.U64(m.Addr)
	e.U32(m.Value)
	e.U64(m.Size)
}
func (m *MemsetRequest) Decode(d *Decoder) {
	m.Target.decode(d)
	m.Addr = d.U64()
	m.Value = d.U32()
	m.Size = d.U64()
}

// WriteRequest copies Data to device memory.
type WriteRequest struct {
	Target
	Addr uint64
	Data []byte
}

func (m *WriteRequest) Encode(e *Encoder) { m.Target.encode(e); e.U64(m.Addr); e.Bytes(m.Data) }
func (m *WriteRequest) Decode(d *Decoder) { m.Target.decode(d); m.Addr = d.U64(); m.Data = d.Bytes() }

// ReadRequest copies device memory back (at most 16 MiB).
type ReadRequest struct {
	Target
	Addr uint64
	Size uint32
}

func (m *ReadRequest) Encode(e *Encoder) { m.Target.encode(e); e.U64(m.Addr); e.U32(m.Size) }
func (m *ReadRequest) Decode(d *Decoder) { m.Target.decode(d); m.Addr = d.U64(); m.Size = d.U32() }

// DataReply carries bytes.
type DataReply struct{ Data []byte }

func (m *DataReply) Encode(e *Encoder) { e.Bytes(m.Data) }
func (m *DataReply) Decode(d *Decoder) { m.Data = d.Bytes() }

// Host buffer kinds for RegisterHost.
const (
	HostMemfd  = 1 // a memfd the tool created
	HostBPFMap = 2 // a BPF_F_MMAPABLE BPF array map
)

// RegisterHostRequest maps the fd sent with it (SCM_RIGHTS) and registers
// it with cuMemHostRegister(DEVICEMAP|PORTABLE).
type RegisterHostRequest struct {
	Target
	Kind   uint32
	Size   uint64
	Offset uint64 // page aligned
}

func (m *RegisterHostRequest) Encode(e *Encoder) {
	m.Target.encode(e)
	e.U32(m.Kind)
	e.U64(m.Size)
	e.U64(m.Offset)
}
func (m *RegisterHostRequest) Decode(d *Decoder) {
	m.Target.decode(d)
	m.Kind = d.U32()
	m.Size = d.U64()
	m.Offset = d.U64()
}

// RegisterHostReply gives the region's id and addresses.
type RegisterHostReply struct {
	RegionID uint64
	DevAddr  uint64 // what GPU code uses
	HostAddr uint64 // in the agent's process (informational)
}

func (m *RegisterHostReply) Encode(e *Encoder) {
	e.U64(m.RegionID)
	e.U64(m.DevAddr)
	e.U64(m.HostAddr)
}
func (m *RegisterHostReply) Decode(d *Decoder) {
	m.RegionID = d.U64()
	m.DevAddr = d.U64()
	m.HostAddr = d.U64()
}

// SnapshotRequest copies Size bytes of device memory at Src into a
// registered host region at RegionOffset: after the session's instrumented
// launches issued so far, or with SnapshotLive (version 8) as the memory is
// now.
type SnapshotRequest struct {
	Target
	Src          uint64
	RegionID     uint64
	RegionOffset uint64
	Size         uint64
	Flags        uint32
}

// SnapshotRequest flags.
const (
	// SnapshotLive: copy without waiting for the application's launches,
	// which may still be writing the memory (the tool checks what it
	// reads). A table that kernels fill while the application runs is read
	// this way without holding up the reader behind queued work, nor
	// recording the application's deferred launch events.
	SnapshotLive uint32 = 1
)

func (m *SnapshotRequest) Encode(e *Encoder) {
	m.Target.encode(e)
	e.U64(m.Src)
	e.U64(m.RegionID)
	e.U64(m.RegionOffset)
	e.U64(m.Size)
	e.U32(m.Flags)
}
func (m *SnapshotRequest) Decode(d *Decoder) {
	m.Target.decode(d)
	m.Src = d.U64()
	m.RegionID = d.U64()
	m.RegionOffset = d.U64()
	m.Size = d.U64()
	m.Flags = d.U32()
}

// RingDrainRequest drains a GPU event ring in device memory into the
// tool's host mirror in one round trip (OpRingDrain). The ring at Ring is
// Shards (a power of two) 256-byte control blocks, then for each shard
// DataBytes (S, a power of two >= 4096) data bytes and TailBytes (T, a
// multiple of 8) tail bytes; the registered region RegionID mirrors that
// layout. Release holds each shard's new released position: where it
// differs from the released position in the mirror's copy of that shard's
// control block (each must lie between that and the reserved position the
// same copy shows), the agent writes it to the shard's control block + 128.
// It then copies the control blocks to region offset 0 and, without
// RingDrainHostData, each shard's data of positions [CopyFrom, reserved) to
// its place in the region. CopyFrom (protocol 11; empty: Release) lies
// between Release and that reserved position: the records before it were
// handed to the tool, which may still read them in the mirror until it
// releases them, so the copy must not write there.
type RingDrainRequest struct {
	Target
	Ring      uint64
	RegionID  uint64
	DataBytes uint64
	TailBytes uint64
	Flags     uint32
	Release   []uint64 // one per shard
	CopyFrom  []uint64 // one per shard, or none
}

// RingDrainHostData (RingDrainRequest.Flags bit 0): the ring's data area
// is the registered region itself (the GPU writes it directly), so the
// agent copies no data; it still writes the released positions and copies
// the control blocks.
const RingDrainHostData = 1

func (m *RingDrainRequest) Encode(e *Encoder) {
	m.Target.encode(e)
	e.U64(m.Ring)
	e.U64(m.RegionID)
	e.U64(m.DataBytes)
	e.U64(m.TailBytes)
	e.U32(m.Flags)
	e.U32(uint32(len(m.Release)))
	for _, r := range m.Release {
		e.U64(r)
	}
	e.U32(uint32(len(m.CopyFrom)))
	for _, r := range m.CopyFrom {
		e.U64(r)
	}
}
func (m *RingDrainRequest) Decode(d *Decoder) {
	m.Target.decode(d)
	m.Ring = d.U64()
	m.RegionID = d.U64()
	m.DataBytes = d.U64()
	m.TailBytes = d.U64()
	m.Flags = d.U32()
	n := d.Count(8)
	m.Release = make([]uint64, 0, n)
	for range n {
		m.Release = append(m.Release, d.U64())
	}
	n = d.Count(8)
	m.CopyFrom = nil
	for range n {
		m.CopyFrom = append(m.CopyFrom, d.U64())
	}
}

// RingDrainReply says how many data bytes the drain copied, how long the
// agent spent on it (nanoseconds from the request's arrival to the reply's
// making) and how much of that it waited for its copies (stream
// synchronisation). RecvNs and SentNs (agents since protocol 6; 0 from
// older ones) are the agent's CLOCK_MONOTONIC when the request arrived and
// when the reply went out, after the agent left the context: with the
// tool's own clock readings around the call they split a round trip into
// socket and agent time. ReadyNs (protocol 7) is when the agent's session
// thread was last ready to read a request before this one arrived (done with
// the one before): a request sent earlier waited for the agent, not the
// socket.
type RingDrainReply struct{ Copied, WaitNs, OpNs, RecvNs, SentNs, ReadyNs uint64 }

func (m *RingDrainReply) Encode(e *Encoder) {
	e.U64(m.Copied)
	e.U64(m.WaitNs)
	e.U64(m.OpNs)
	e.U64(m.RecvNs)
	e.U64(m.SentNs)
	e.U64(m.ReadyNs)
}
func (m *RingDrainReply) Decode(d *Decoder) {
	m.Copied = d.U64()
	m.WaitNs = d.U64()
	m.OpNs = d.U64()
	if d.Remaining() >= 16 {
		m.RecvNs = d.U64()
		m.SentNs = d.U64()
	}
	if d.Remaining() >= 8 {
		m.ReadyNs = d.U64()
	}
}

// ActivateRequest routes launches of Kernel (a handle from List) in the
// clone's context to Function (a handle from LoadReply). With
// LaunchWords.Hidden set, the agent passes Function two more parameters.
type ActivateRequest struct {
	Kernel   uint64
	CloneID  uint64
	Function uint64
	LaunchWords
}

// LaunchWords asks the agent to pass an instrumented clone two hidden
// trailing .param .u64 parameters (appended after the kernel's own) at
// every launch it routes to the clone:
//
//   - word 0: the CLOCK_MONOTONIC time (ns) a uprobe stamped into the
//     launching thread's slot, or 0 when the slot holds no stamp of this
//     launch (another thread's tag, no time, older than 1 ms or in the
//     future), for graph launches and when Region is 0;
//   - word 1: the stream the application passed (CUlaunchConfig.hStream for
//     the Ex form) masked by LaunchStreamMask, with the low 8 bits of the
//     slot's tag (the API kind the uprobe saw; 0 without a stamp) in bits
//     56-63. Kernel nodes of CUDA graphs (and launches captured into one)
//     get word 0 = 0 and word 1 = LaunchKindGraphWord << 56 | the device
//     address of their graph's stamp word: an 8-byte word the agent
//     allocates per graph (in the node's context) and, while a probe with
//     slots is active, sets on the launch's stream right before each launch
//     of the graph (the launching thread's fresh stamp when its tag has
//     LaunchKindPending set, else the agent's own CLOCK_MONOTONIC time at
//     the driver call) and back to 0 right after it. A node whose graph is
//     not known (or no word can be had) gets word 1 = LaunchKindGraph << 56.
//
// The slots are Slots (a power of two) LaunchSlotSize-byte records at
// byte Offset of the registered host region Region (RegisterHost, same
// session): the thread with Linux id tid uses slot (tid*4) & (Slots-1) (a cache line of its
// own for 256 consecutive threads), whose
// u64 word 0 is the time and u64 word 1 the tag tid<<32 | kind. The agent
// only reads them. Unregistering the region makes word 0 read 0.
type LaunchWords struct {
	Hidden    uint32 // hidden u64 parameters appended to the clone: 0 (none) or 2
	Params    uint32 // the kernel's own parameter count (kernelParams launches)
	BufOffset uint32 // byte offset of the first hidden word in the packed parameter buffer (extra launches), 8-aligned
	Region    uint64 // registered host region holding the slots; 0: none (word 0 is always 0)
	Offset    uint64 // byte offset of slot 0 in Region, 8-aligned
	Slots     uint32 // number of slots, a power of two
}

// Launch-word layout.
const (
	LaunchHiddenWords   = 2         // LaunchWords.Hidden for launch words
	LaunchSlotSize      = 16        // bytes per slot: u64 time, u64 tag
	LaunchStreamMask    = 1<<56 - 1 // the stream bits of word 1
	LaunchKindGraph     = 0xFF      // word 1's kind (bits 56-63) for graph kernel nodes without a stamp word
	LaunchKindGraphWord = 0xFE      // word 1's kind for graph kernel nodes: low 56 bits = their graph's stamp word
	LaunchKindPending   = 0x80      // in a slot tag's kind: a runtime-API stamp whose driver call is still to come
	LaunchMaxAgeNanos   = 1_000_000 // an older stamp is not the launch's (word 0 = 0)
)

func (m *ActivateRequest) Encode(e *Encoder) {
	e.U64(m.Kernel)
	e.U64(m.CloneID)
	e.U64(m.Function)
	e.U32(m.Hidden)
	e.U32(m.Params)
	e.U32(m.BufOffset)
	e.U64(m.Region)
	e.U64(m.Offset)
	e.U32(m.Slots)
}

func (m *ActivateRequest) Decode(d *Decoder) {
	m.Kernel = d.U64()
	m.CloneID = d.U64()
	m.Function = d.U64()
	m.Hidden = d.U32()
	m.Params = d.U32()
	m.BufOffset = d.U32()
	m.Region = d.U64()
	m.Offset = d.U64()
	m.Slots = d.U32()
}

// ClockRequest measures the offset of the GPU's %globaltimer from the
// agent's CLOCK_MONOTONIC in Target's context (OpClock): Rounds (1 to
// ClockMaxRounds) round trips through mapped host memory to a one-thread
// kernel; the shortest one is kept.
type ClockRequest struct {
	Target
	Rounds uint32
}

// ClockMaxRounds bounds ClockRequest.Rounds.
const ClockMaxRounds = 64

func (m *ClockRequest) Encode(e *Encoder) { m.Target.encode(e); e.U32(m.Rounds) }
func (m *ClockRequest) Decode(d *Decoder) { m.Target.decode(d); m.Rounds = d.U32() }

// ClockReply: at CLOCK_MONOTONIC time At, globaltimer read
// CLOCK_MONOTONIC + Offset, to within ±Bound ns.
type ClockReply struct {
	Offset int64  // globaltimer - CLOCK_MONOTONIC, ns
	Bound  uint64 // error bound, ns: half the best round trip
	At     uint64 // CLOCK_MONOTONIC ns of the best round's midpoint
}

func (m *ClockReply) Encode(e *Encoder) { e.U64(uint64(m.Offset)); e.U64(m.Bound); e.U64(m.At) }
func (m *ClockReply) Decode(d *Decoder) { m.Offset = int64(d.U64()); m.Bound = d.U64(); m.At = d.U64() }

// LaunchRequest runs Function (a handle from LoadReply of this session,
// loaded in Target's context) once as a kernel of its own (OpLaunch): on the
// session's stream, with Grid and Block dimensions (each at least 1),
// SharedBytes of dynamic shared memory and Params, the parameters packed
// the way CUDA lays out kernelParams (each at its natural alignment; empty
// for a kernel without any). The agent waits for the kernel up to
// TimeoutMs (0: LaunchDefaultTimeoutMs). Only an agent in direct mode
// (Hello.Direct) launches; inside an application it answers
// StatusUnsupported. A kernel still running at the timeout answers
// StatusCUDA with CUResult LaunchTimedOut; one that faulted, StatusCUDA
// with its CUresult (its context is then unusable).
type LaunchRequest struct {
	Target
	Function    uint64
	Grid        [3]uint32
	Block       [3]uint32
	SharedBytes uint32
	Params      []byte
	TimeoutMs   uint32
}

// Launch limits and results.
const (
	LaunchDefaultTimeoutMs = 60_000
	LaunchMaxTimeoutMs     = 86_400_000
	LaunchMaxParams        = 32764 // the driver's limit on a kernel's parameter bytes
	LaunchTimedOut         = 600   // CUDA_ERROR_NOT_READY: the kernel was still running
)

func (m *LaunchRequest) Encode(e *Encoder) {
	m.Target.encode(e)
	e.U64(m.Function)
	for _, v := range m.Grid {
		e.U32(v)
	}
	for _, v := range m.Block {
		e.U32(v)
	}
	e.U32(m.SharedBytes)
	e.Bytes(m.Params)
	e.U32(m.TimeoutMs)
}

func (m *LaunchRequest) Decode(d *Decoder) {
	m.Target.decode(d)
	m.Function = d.U64()
	for i := range m.Grid {
		m.Grid[i] = d.U32()
	}
	for i := range m.Block {
		m.Block[i] = d.U32()
	}
	m.SharedBytes = d.U32()
	m.Params = d.Bytes()
	m.TimeoutMs = d.U32()
}

// LaunchReply times a kernel that ran to completion: KernelNanos between
// CUDA events recorded around it on its stream (Timed), or, where the
// events could not time it, the wall time; WallNanos from the launch call
// to the agent seeing it done.
type LaunchReply struct {
	KernelNanos uint64
	WallNanos   uint64
	Timed       bool
}

func (m *LaunchReply) Encode(e *Encoder) { e.U64(m.KernelNanos); e.U64(m.WallNanos); e.Bool(m.Timed) }
func (m *LaunchReply) Decode(d *Decoder) {
	m.KernelNanos = d.U64()
	m.WallNanos = d.U64()
	m.Timed = d.Bool()
}

// CountReply carries a count (Deactivate: probes removed).
type CountReply struct{ Count uint32 }

func (m *CountReply) Encode(e *Encoder) { e.U32(m.Count) }
func (m *CountReply) Decode(d *Decoder) { m.Count = d.U32() }

// ProbeStat is one active probe of this session.
type ProbeStat struct {
	Kernel   uint64
	CloneID  uint64
	Ctx      uint64
	Launches uint64 // instrumented launches
	Failures uint64 // instrumented launches the driver refused (the original ran)
	LastErr  int32
	Disabled bool
}

// Stats is the reply to OpStats.
type Stats struct{ Probes []ProbeStat }

func (m *Stats) Encode(e *Encoder) {
	e.U32(uint32(len(m.Probes)))
	for _, p := range m.Probes {
		e.U64(p.Kernel)
		e.U64(p.CloneID)
		e.U64(p.Ctx)
		e.U64(p.Launches)
		e.U64(p.Failures)
		e.I32(p.LastErr)
		e.Bool(p.Disabled)
	}
}

func (m *Stats) Decode(d *Decoder) {
	m.Probes = make([]ProbeStat, d.Count(48))
	for i := range m.Probes {
		m.Probes[i] = ProbeStat{Kernel: d.U64(), CloneID: d.U64(), Ctx: d.U64(), Launches: d.U64(),
			Failures: d.U64(), LastErr: d.I32(), Disabled: d.Bool()}
	}
}

// GraphExec is one executable graph the application launched while a tool
// was attached (OpGraphs). Counts are the agent's since it started counting
// (its first tool's hello): a tool subtracts what it read as it came.
// Exec 0 holds the counts of the execs the application destroyed since.
type GraphExec struct {
	Exec                   uint64
	Launches               uint64 // graph launches (cuGraphLaunch and its per-thread-stream flavour)
	LaunchesInstrumented   uint64 // of which ran with instrumented kernel nodes
	LaunchesKernelTimes    uint64 // of which while CUPTI's kernel records were on
	KernelRuns             uint64 // kernel-node runs of those launches (nodes known)
	KernelRunsInstrumented uint64 // of which instrumented
	Captured               uint64 // launches into a stream capture (not run then)
	KernelNodes            uint32 // GraphNodesUnknown: the agent does not know them
	InstrumentedNodes      uint32 // kernel nodes instrumented now
	State                  uint32 // GraphOriginal, GraphSwapped
	Why                    uint32 // Graph*: why the exec runs its original kernel nodes
	CUResult               int32  // the driver's refusal (GraphRefused, GraphRestoreFailed)
	WhyText                string
	Detail                 string // the update's result, or the call that changed the exec in place
}

// GraphExec's KernelNodes when the agent never saw the exec instantiated.
const GraphNodesUnknown = 0xFFFFFFFF

// GraphExec.State.
const (
	GraphOriginal = 0
	GraphSwapped  = 1
)

// GraphExec.Why (execs.c GXW_*).
const (
	GraphInstrumented   = 0
	GraphBeforeAgent    = 1
	GraphNoSnapshot     = 2
	GraphChangedInPlace = 3
	GraphRefused        = 4
	GraphRestoreFailed  = 5
	GraphNoProbe        = 6
)

// Graphs is the reply to OpGraphs.
type Graphs struct{ Execs []GraphExec }

func (m *Graphs) Encode(e *Encoder) {
	e.U32(uint32(len(m.Execs)))
	for _, x := range m.Execs {
		e.U64(x.Exec)
		e.U64(x.Launches)
		e.U64(x.LaunchesInstrumented)
		e.U64(x.LaunchesKernelTimes)
		e.U64(x.KernelRuns)
		e.U64(x.KernelRunsInstrumented)
		e.U64(x.Captured)
		e.U32(x.KernelNodes)
		e.U32(x.InstrumentedNodes)
		e.U32(x.State)
		e.U32(x.Why)
		e.I32(x.CUResult)
		e.Str(x.WhyText)
		e.Str(x.Detail)
	}
}

func (m *Graphs) Decode(d *Decoder) {
	m.Execs = make([]GraphExec, d.Count(84))
	for i := range m.Execs {
		m.Execs[i] = GraphExec{Exec: d.U64(), Launches: d.U64(), LaunchesInstrumented: d.U64(),
			LaunchesKernelTimes: d.U64(), KernelRuns: d.U64(), KernelRunsInstrumented: d.U64(), Captured: d.U64(),
			KernelNodes: d.U32(), InstrumentedNodes: d.U32(), State: d.U32(), Why: d.U32(), CUResult: d.I32(),
			WhyText: d.Str(), Detail: d.Str()}
	}
}

// Graph launch numbers (agent gxseq.c, docs/graphs.md). A kernel node the
// agent swapped into an executable graph for a tool with launch words gets
// an id of that tool's session instead of a stamp: launch word 1 is
// LaunchKindGraphSeq<<56 | id, and the node's probe counts its runs in a
// counter of that id (launchlate's node_runs). Run k of id is launch
// number Base+k of the exec's ring when Base+k < End; the agent keeps the
// launches' stamps by number and hands them out with OpGraphStamps.
const (
	LaunchKindGraphSeq = 0xFD
	GraphSeqIDs        = 1 << 18 // ids a session may have (0 is none)
	GraphSeqOpen       = ^uint64(0)
)

// GraphSeqID is one id's epoch: the exec's ring, the launch number its
// node's first run belongs to, and the one its runs stop at (GraphSeqOpen
// while the exec runs the node).
type GraphSeqID struct {
	ID, Ring  uint32
	Base, End uint64
}

// GraphStampRun is a ring's stamps (CLOCK_MONOTONIC ns) of launches First,
// First+1, ...; Lost launches before First were overwritten unread.
type GraphStampRun struct {
	Ring        uint32
	First, Lost uint64
	Stamps      []uint64
}

// GraphStamps is the reply to OpGraphStamps: what is new since the
// session's last call (ids new or ended since, stamps not read yet).
type GraphStamps struct {
	IDs  []GraphSeqID
	Runs []GraphStampRun
}

func (m *GraphStamps) Encode(e *Encoder) {
	e.U32(uint32(len(m.IDs)))
	for _, x := range m.IDs {
		e.U32(x.ID)
		e.U32(x.Ring)
		e.U64(x.Base)
		e.U64(x.End)
	}
	e.U32(uint32(len(m.Runs)))
	for _, r := range m.Runs {
		e.U32(r.Ring)
		e.U64(r.First)
		e.U64(r.Lost)
		e.U32(uint32(len(r.Stamps)))
		for _, v := range r.Stamps {
			e.U64(v)
		}
	}
}

func (m *GraphStamps) Decode(d *Decoder) {
	m.IDs = make([]GraphSeqID, d.Count(24))
	for i := range m.IDs {
		m.IDs[i] = GraphSeqID{ID: d.U32(), Ring: d.U32(), Base: d.U64(), End: d.U64()}
	}
	m.Runs = make([]GraphStampRun, d.Count(24))
	for i := range m.Runs {
		r := GraphStampRun{Ring: d.U32(), First: d.U64(), Lost: d.U64()}
		r.Stamps = make([]uint64, d.Count(8))
		for j := range r.Stamps {
			r.Stamps[j] = d.U64()
		}
		m.Runs[i] = r
	}
}

// ProbeFailed notifies that an instrumented launch failed; the original
// kernel ran instead and the probe was switched off.
type ProbeFailed struct {
	Kernel   uint64
	CUResult int32
}

func (m *ProbeFailed) Encode(e *Encoder) { e.U64(m.Kernel); e.I32(m.CUResult) }
func (m *ProbeFailed) Decode(d *Decoder) { m.Kernel = d.U64(); m.CUResult = d.I32() }

// LateTables (NoteLateTables): an agent injected into a running process
// found, after this tool came, Count driver entry points a CUDA runtime in
// Object keeps (it started after the attach): its launches before then
// passed the agent by.
type LateTables struct {
	Count  uint32
	Object string
}

func (m *LateTables) Encode(e *Encoder) { e.U32(m.Count); e.Str(m.Object) }
func (m *LateTables) Decode(d *Decoder) { m.Count = d.U32(); m.Object = d.Str() }

// ReplyFor returns a fresh reply value for op (nil: no fields).
func ReplyFor(op Op) Message {
	switch op {
	case OpHello:
		return &Hello{}
	case OpList:
		return &Inventory{}
	case OpFetch:
		return &FetchReply{}
	case OpGlobals:
		return &GlobalsReply{}
	case OpLoad:
		return &LoadReply{}
	case OpAlloc:
		return &AddrReply{}
	case OpRead:
		return &DataReply{}
	case OpRegisterHost:
		return &RegisterHostReply{}
	case OpDeactivate:
		return &CountReply{}
	case OpStats:
		return &Stats{}
	case OpRingDrain:
		return &RingDrainReply{}
	case OpClock:
		return &ClockReply{}
	case OpLaunch:
		return &LaunchReply{}
	case OpKernelTimes:
		return &KernelTimesReply{}
	case OpGraphs:
		return &Graphs{}
	case OpGraphStamps:
		return &GraphStamps{}
	case OpSanitize:
		return &SanitizeReply{}
	}
	return nil
}

// RequestFor returns a fresh request value for op.
func RequestFor(op Op) Message {
	switch op {
	case OpHello:
		return &HelloRequest{}
	case OpList:
		return &ListRequest{}
	case OpFetch:
		return &FetchRequest{}
	case OpGlobals:
		return &GlobalsRequest{}
	case OpLoad:
		return &LoadRequest{}
	case OpUnload, OpUnregisterHost, OpContinue, OpDeactivate:
		return &IDRequest{}
	case OpAlloc:
		return &AllocRequest{}
	case OpFree:
		return &FreeRequest{}
	case OpMemset:
		return &MemsetRequest{}
	case OpWrite:
		return &WriteRequest{}
	case OpRead:
		return &ReadRequest{}
	case OpRegisterHost:
		return &RegisterHostRequest{}
	case OpSnapshot:
		return &SnapshotRequest{}
	case OpActivate:
		return &ActivateRequest{}
	case OpDetach, OpStats:
		return &Empty{}
	case OpReleaseUnload:
		return &IDRequest{}
	case OpDeviceReady:
		return &DeviceRequest{}
	case OpRingDrain:
		return &RingDrainRequest{}
	case OpClock:
		return &ClockRequest{}
	case OpLaunch:
		return &LaunchRequest{}
	case OpLaunchEvents:
		return &LaunchEventsRequest{}
	case OpKernelTimes:
		return &KernelTimesRequest{}
	case OpSanitize:
		return &SanitizeRequest{}
	}
	return nil
}

// KernelTimesRequest (OpKernelTimes, protocol 10) asks the agent for each
// kernel's GPU start and end as CUPTI's activity records give them, with
// the CPU time of the launch call: the kernels without PTX, which no probe
// can time (docs/agent-protocol.md, "Kernel times").
type KernelTimesRequest struct {
	Action uint32 // KernelTimesStart, KernelTimesRead, KernelTimesStop
	Flags  uint32 // KernelTimesFinal
}

// KernelTimesRequest actions and flags.
const (
	// KernelTimesStart loads CUPTI (libcupti found in the process, its
	// libraries' directories or the CUDA toolkit; GPUBPF_CUPTI names one,
	// or "off") and turns kernel records on. One tool per process at a
	// time; a CUPTI held by another subscriber (a profiler) is refused
	// with StatusUnsupported and the reason.
	KernelTimesStart uint32 = 1
	// KernelTimesRead returns the records completed since the last read.
	KernelTimesRead uint32 = 2
	// KernelTimesStop turns the records off and lets CUPTI go (closing the
	// connection does too).
	KernelTimesStop uint32 = 3
	// KernelTimesFinal (with Read): flush what CUPTI still holds, buffers
	// not full yet included: the process is about to exit.
	KernelTimesFinal uint32 = 1
)

func (m *KernelTimesRequest) Encode(e *Encoder) { e.U32(m.Action); e.U32(m.Flags) }
func (m *KernelTimesRequest) Decode(d *Decoder) { m.Action = d.U32(); m.Flags = d.U32() }

// KernelTimesReply answers KernelTimesRequest. Start fills Library and
// Version; Read fills the rest, and Library with the agent's account of
// what CUPTI handed over since the start (buffers, records by kind, how
// launches are stamped), in words.
type KernelTimesReply struct {
	Library string // start: the libcupti the agent loaded; read: the account
	Version uint32 // cuptiGetVersion
	// CUPTIDropped: records CUPTI dropped (it had no buffer); Dropped:
	// records the agent dropped (the tool read too slowly: its queue was
	// full). Both since the last read.
	CUPTIDropped uint64
	Dropped      uint64
	// Names are the kernel names first used by Records since the last read
	// (a name is sent once per start).
	Names   []KernelTimeName
	Records []KernelTime
}

// KernelTimeName numbers a kernel name (mangled, as CUPTI gives it).
type KernelTimeName struct {
	ID   uint32
	Name string
}

// KernelTime is one kernel execution.
type KernelTime struct {
	// CPU is CLOCK_MONOTONIC ns when the launch call reached the driver (a
	// graph's kernels: the graph launch); 0 when the agent has no stamp
	// for it (the launch came before the records were on, or its stamp was
	// overwritten before the record came).
	CPU uint64
	// Start and End are the kernel's GPU start and end in CLOCK_MONOTONIC
	// ns, as CUPTI converts its GPU timestamps.
	Start, End uint64
	Grid       uint64 // %gridid: unique per launch in its context
	Stream     uint64 // the CUstream the launch named (0: the default stream, or a graph's)
	Ctx        uint64 // 0: the device's primary context; else the CUcontext
	Name       uint32 // KernelTimeName.ID
	Device     int32
	Graph      uint32 // CUDA graph id (0: not launched by a graph)
	Flags      uint32 // KernelTimeStreamUnknown
}

// KernelTime.Flags.
const (
	// KernelTimeStreamUnknown: the launch's stream and context are not
	// known (its CPU time came from CUPTI's API record, which names
	// neither): Stream is 0 and Ctx 0 without meaning it.
	KernelTimeStreamUnknown uint32 = 1
)

// kernelTimeSize is a KernelTime's size on the wire.
const kernelTimeSize = 64

func (m *KernelTimesReply) Encode(e *Encoder) {
	e.Str(m.Library)
	e.U32(m.Version)
	e.U64(m.CUPTIDropped)
	e.U64(m.Dropped)
	e.U32(uint32(len(m.Names)))
	for _, n := range m.Names {
		e.U32(n.ID)
		e.Str(n.Name)
	}
	e.U32(uint32(len(m.Records)))
	for _, r := range m.Records {
		e.U64(r.CPU)
		e.U64(r.Start)
		e.U64(r.End)
		e.U64(r.Grid)
		e.U64(r.Stream)
		e.U64(r.Ctx)
		e.U32(r.Name)
		e.I32(r.Device)
		e.U32(r.Graph)
		e.U32(r.Flags)
	}
}

func (m *KernelTimesReply) Decode(d *Decoder) {
	m.Library = d.Str()
	m.Version = d.U32()
	m.CUPTIDropped = d.U64()
	m.Dropped = d.U64()
	m.Names = make([]KernelTimeName, d.Count(8))
	for i := range m.Names {
		m.Names[i] = KernelTimeName{ID: d.U32(), Name: d.Str()}
	}
	m.Records = make([]KernelTime, d.Count(kernelTimeSize))
	for i := range m.Records {
		m.Records[i] = KernelTime{CPU: d.U64(), Start: d.U64(), End: d.U64(), Grid: d.U64(), Stream: d.U64(),
			Ctx: d.U64(), Name: d.U32(), Device: d.I32(), Graph: d.U32(), Flags: d.U32()}
	}
}

// Sanitizer path (OpSanitize): kernels without PTX are patched in place by
// NVIDIA's Compute Sanitizer to call a patch module at every thread's block
// entry and exit. The agent can do it only in a program it was preloaded
// into with GPUBPF_SANITIZER set (the sanitizer must subscribe before the
// first CUDA context); SanitizeReply.Why says otherwise.
const (
	SanitizeAccount = 1 // only the account: nothing selected or changed
	SanitizeEnd     = 2 // take the patches out of every module
	// SanitizeLateIndex as a kernel's index: the agent gives it one from
	// the request's Pool at its first patched launch (SanitizeReply.
	// Assigned says which), so that the kernels that run, not the
	// thousands a library holds, take the few indexes a tool's tables have.
	SanitizeLateIndex = 0xFFFFFFFE
)

// SanitizeKernel is a kernel (mangled name) for the sanitizer path and the
// value bpf_gpu_kernel_index has in it.
type SanitizeKernel struct {
	Name  string
	Index uint32
}

// SanitizeRequest selects kernels for the sanitizer path. Patch is the
// patch module (ptxas --compile-as-tools-patch), sent once (empty keeps
// the one given before); Enter and Exit name its callbacks ("" for none).
// Kernels add to the selection. Target is the one context the module may
// be patched into: the programs address that device's maps (launches of
// the kernels elsewhere run unpatched and count as refused).
type SanitizeRequest struct {
	Target
	Flags       uint32
	Enter, Exit string
	Patch       []byte
	Kernels     []SanitizeKernel
	Pool        []uint32 // kernel indexes for SanitizeLateIndex kernels, added to the agent's pool
}

func (m *SanitizeRequest) Encode(e *Encoder) {
	m.Target.encode(e)
	e.U32(m.Flags)
	e.Str(m.Enter)
	e.Str(m.Exit)
	e.Bytes(m.Patch)
	e.U32(uint32(len(m.Kernels)))
	for _, k := range m.Kernels {
		e.Str(k.Name)
		e.U32(k.Index)
	}
	e.U32(uint32(len(m.Pool)))
	for _, i := range m.Pool {
		e.U32(i)
	}
}

func (m *SanitizeRequest) Decode(d *Decoder) {
	m.Target.decode(d)
	m.Flags = d.U32()
	m.Enter = d.Str()
	m.Exit = d.Str()
	m.Patch = d.Bytes()
	m.Kernels = make([]SanitizeKernel, d.Count(8))
	for i := range m.Kernels {
		m.Kernels[i] = SanitizeKernel{Name: d.Str(), Index: d.U32()}
	}
	m.Pool = make([]uint32, d.Count(4))
	for i := range m.Pool {
		m.Pool[i] = d.U32()
	}
}

// SanitizeReply is the sanitizer path's account in the process since this
// tool's selection began: launches of selected kernels that ran patched and
// their threads (grid x block, what the probes must count), launches that
// ran unpatched because their module could not be patched, modules
// patched, failures and the last one's words.
type SanitizeReply struct {
	Ready                      bool
	Why                        string
	Launches, Threads, Refused uint64
	Patched, Failures          uint32
	LastFailure                string
	Selected                   uint32
	// PoolLeft: indexes of the pool not given yet; Assigned: kernels given
	// one since this tool's last request (each is said once).
	PoolLeft uint32
	Assigned []SanitizeKernel
}

func (m *SanitizeReply) Encode(e *Encoder) {
	e.Bool(m.Ready)
	e.Str(m.Why)
	e.U64(m.Launches)
	e.U64(m.Threads)
	e.U64(m.Refused)
	e.U32(m.Patched)
	e.U32(m.Failures)
	e.Str(m.LastFailure)
	e.U32(m.Selected)
	e.U32(m.PoolLeft)
	e.U32(uint32(len(m.Assigned)))
	for _, k := range m.Assigned {
		e.Str(k.Name)
		e.U32(k.Index)
	}
}

func (m *SanitizeReply) Decode(d *Decoder) {
	m.Ready = d.Bool()
	m.Why = d.Str()
	m.Launches = d.U64()
	m.Threads = d.U64()
	m.Refused = d.U64()
	m.Patched = d.U32()
	m.Failures = d.U32()
	m.LastFailure = d.Str()
	m.Selected = d.U32()
	m.PoolLeft = d.U32()
	m.Assigned = make([]SanitizeKernel, d.Count(8))
	for i := range m.Assigned {
		m.Assigned[i] = SanitizeKernel{Name: d.Str(), Index: d.U32()}
	}
}
