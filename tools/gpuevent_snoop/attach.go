package gpuevent_snoop

import (
	"bufio"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/gpubpf/gpubpf/pkg/links"
	"github.com/gpubpf/gpubpf/pkg/procmaps"
	"github.com/gpubpf/gpubpf/pkg/symbolize"
)

var (
	isCudart = procmaps.LibraryMatcher("libcudart.so")
	isCuda   = procmaps.LibraryMatcher("libcuda.so")
)

// isCUDALib reports whether a path is a CUDA runtime or driver library.
func isCUDALib(p string) bool { return isCudart(p) || isCuda(p) }

// isAgentLib reports whether a path is the gpubpf agent library
// (libgpubpf-agent.so, or a copy extracted by a tool, named by its hash).
func isAgentLib(p string) bool {
	b := filepath.Base(p)
	return strings.HasPrefix(b, "libgpubpf-agent") && strings.Contains(b, ".so")
}

// attachMode is how probes are attached, the best the kernel offers.
type attachMode int

const (
	// modeSingle: one perf-event uprobe and uretprobe per function.
	modeSingle attachMode = iota
	// modeMulti: an entry and a return uprobe_multi link per object
	// (kernel 6.6+): detaching waits for one RCU grace period per link
	// instead of one per probe, which kept the tool alive for seconds.
	modeMulti
	// modeSession: one uprobe_multi session link per object (kernel
	// 6.13+): the entry program decides per call whether the return is
	// taken, so a launch costs one trap instead of a trap and a return.
	modeSession
)

func (m attachMode) String() string {
	switch m {
	case modeSession:
		return "uprobe sessions"
	case modeMulti:
		return "uprobes+uretprobes"
	}
	return "single uprobes+uretprobes"
}

// Attacher puts the probes on every traced API an object defines. Uprobes
// live on the file (inode): a link without a process filter fires in every
// process that maps the file, now or later. With -p and CMD each link names
// its process, so no other process pays for the traps.
//
// The driver's launch functions get links of their own. cudart calls one of
// them for every runtime launch, so probing them everywhere doubles the cost
// of a launch-bound program for nothing the runtime probe has not already
// reported. They are probed in a process only once it may launch through
// the driver itself (EnableDriverLaunches): an object it maps imports or
// names a driver launch function, or it looked a kernel up from outside
// cudart.
type Attacher struct {
	enter, exit, session *ebpf.Program
	mode                 attachMode
	kinds                uint32
	noDriver             bool // --no-driver: runtime APIs only
	launchEntry          bool // --launch-entry: launches from the entry probe alone
	// allDriverLaunches: the driver's launch functions are probed in
	// every process (--driver-launches, tracing all, single uprobes).
	allDriverLaunches bool
	// markPID records a process's flags in the BPF pids map.
	markPID func(pid int, flags uint8) error

	mu       sync.Mutex
	objs     []*object
	byID     map[fileID]*object
	infos    map[fileID]*elfInfo // every ELF object looked at, for evidence
	notELF   map[fileID]bool
	attached map[objPID]bool // main probes of object in process (pid 0: all)
	launchOn map[objPID]bool // driver launch probes likewise
	driverIn map[int]string  // processes whose driver launches are probed, and why
	// agentIn: processes whose kernel launches come from the gpubpf agent
	// loaded in them (agentfeed.go): no launch function is probed there.
	agentIn map[int]bool
	links   []link.Link
	// launchLinks are the links of the launch functions (runtime and
	// driver) per process, kept apart from links so that they can be
	// closed alone when the agent takes a process's launches over.
	launchLinks map[int][]link.Link
	probes      int
}

type fileID struct{ dev, ino uint64 }

type objPID struct {
	id  fileID
	pid int
}

// object is a probed object: libcudart, libcuda or an executable with static
// cudart.
type object struct {
	id          fileID
	host, shown string
	index       uint64 // in the cookie: names the object for the resolver
	syms        *symbolize.Object
	main        probeList // runtime APIs and driver APIs other than launches
	rtLaunch    probeList // the runtime's kernel launch functions
	launch      probeList // the driver's launch functions
	runtime     bool      // defines runtime APIs (cudart, shared or static)
	driver      bool      // defines driver APIs
}

func statID(p string) (fileID, error) {
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		return fileID{}, err
	}
	return fileID{uint64(st.Dev), st.Ino}, nil
}

func NewAttacher(kinds uint32) *Attacher {
	return &Attacher{
		kinds: kinds, byID: map[fileID]*object{}, infos: map[fileID]*elfInfo{},
		notELF: map[fileID]bool{}, attached: map[objPID]bool{}, launchOn: map[objPID]bool{},
		driverIn: map[int]string{}, agentIn: map[int]bool{}, launchLinks: map[int][]link.Link{},
	}
}

// apiNames is every traced API's name, for reading objects' symbols.
var apiNames = func() map[string]bool {
	m := map[string]bool{}
	for i := range apis {
		m[apis[i].Name] = true
	}
	return m
}()

// Object returns the symbols and path of the i-th probed object (the index
// events carry in their cookie).
func (a *Attacher) Object(i int) (*symbolize.Object, string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if i < 0 || i >= len(a.objs) {
		return nil, ""
	}
	return a.objs[i].syms, a.objs[i].shown
}

// info reads (once per file) what the tool needs from an ELF object. It
// reads the file without holding a.mu: the objects of a framework run to
// hundreds of MiB, and a kernel lookup must not wait for them to enable
// the driver's launch probes.
// infoAt is info for the file at hostPath, nil when it cannot be read.
func (a *Attacher) infoAt(hostPath string) *elfInfo {
	id, err := statID(hostPath)
	if err != nil {
		return nil
	}
	in, err := a.info(id, hostPath)
	if err != nil {
		return nil
	}
	return in
}

func (a *Attacher) info(id fileID, hostPath string) (*elfInfo, error) {
	a.mu.Lock()
	in, ok := a.infos[id]
	bad := a.notELF[id]
	a.mu.Unlock()
	if ok {
		return in, nil
	}
	if bad {
		return nil, errNotELF
	}
	in, err := readELFInfo(hostPath, apiNames)
	a.mu.Lock()
	defer a.mu.Unlock()
	if err != nil {
		a.notELF[id] = true
		return nil, err
	}
	a.infos[id] = in
	return in, nil
}

var errNotELF = errors.New("not an ELF object")

// object returns the probed object for a file, building its probe lists the
// first time; nil if it defines no traced API. a.mu is held.
func (a *Attacher) object(id fileID, in *elfInfo, hostPath, shown string) *object {
	if o, ok := a.byID[id]; ok {
		return o
	}
	o := &object{id: id, host: hostPath, shown: shown, index: uint64(min(len(a.objs), 255))}
	for i := range apis {
		api := &apis[i]
		fn, ok := in.funcs[api.Name]
		if !ok {
			continue
		}
		if api.Driver {
			o.driver = true
		} else {
			o.runtime = true
		}
		// Lookups name the launches; they are rare, so --no-driver keeps them.
		if a.kinds&(1<<api.Kind) == 0 || (api.Driver && a.noDriver && !api.Lookup) {
			continue
		}
		c := cookie(i) | o.index<<24
		// Without sessions every return is taken unless the user asked
		// for launches from their entry alone.
		if a.launchEntry && a.mode != modeSession && api.IsLaunch() {
			c |= cEntryOnly
		}
		l := &o.main
		switch {
		case api.isDriverLaunch():
			l = &o.launch
		case api.IsLaunch():
			l = &o.rtLaunch
		}
		l.add(api.Name, fn.fileOff+fn.probe.off, c, fn.probe.note)
	}
	if len(o.main.syms)+len(o.rtLaunch.syms)+len(o.launch.syms) == 0 {
		a.byID[id] = nil
		return nil
	}
	o.syms, _ = symbolize.Open(hostPath) // nil: names from /proc/PID/maps only
	a.byID[id] = o
	a.objs = append(a.objs, o)
	return o
}

// Attach probes every traced API that the ELF object at hostPath defines,
// in process pid (0: every process). It returns how many functions it
// probed now (0: none defined, or already probed).
func (a *Attacher) Attach(hostPath, shown string, pid int) (int, error) {
	id, err := statID(hostPath)
	if err != nil {
		return 0, fmt.Errorf("cannot open %s: %w", shown, err)
	}
	in, err := a.info(id, hostPath)
	if err != nil {
		return 0, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	o := a.object(id, in, hostPath, shown)
	if o == nil {
		return 0, nil
	}
	if a.attached[objPID{id, 0}] || a.attached[objPID{id, pid}] {
		return 0, nil
	}
	ls, err := a.attachList(o, &o.main, pid)
	if err != nil {
		return 0, err
	}
	n := len(o.main.syms)
	var launchLs []link.Link
	if !a.agentIn[pid] {
		rl, err := a.attachList(o, &o.rtLaunch, pid)
		if err != nil {
			links.CloseAll(ls)
			return 0, err
		}
		launchLs = rl
		n += len(o.rtLaunch.syms)
	}
	if len(o.launch.syms) > 0 && !a.agentIn[pid] && (pid == 0 || a.allDriverLaunches || a.driverIn[pid] != "") {
		ll, err := a.attachList(o, &o.launch, pid)
		if err != nil {
			links.CloseAll(ls)
			links.CloseAll(launchLs)
			return 0, err
		}
		launchLs = append(launchLs, ll...)
		a.launchOn[objPID{id, pid}] = true
		n += len(o.launch.syms)
	}
	a.links = append(a.links, ls...)
	if len(launchLs) > 0 {
		a.launchLinks[pid] = append(a.launchLinks[pid], launchLs...)
	}
	a.attached[objPID{id, pid}] = true
	a.probes += n
	return n, nil
}

// pointNotes lists, for -v, the probes of an object not on the function's
// first instruction or single-stepped by the kernel: what the cost of a
// hit depends on.
func (a *Attacher) pointNotes(hostPath string) string {
	id, err := statID(hostPath)
	if err != nil {
		return ""
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	o := a.byID[id]
	if o == nil {
		return ""
	}
	var out []string
	for _, l := range []*probeList{&o.main, &o.rtLaunch, &o.launch} {
		for i, note := range l.notes {
			if strings.HasPrefix(note, "single-stepped") || strings.HasPrefix(note, "after endbr64") {
				out = append(out, l.syms[i]+": "+note)
			}
		}
	}
	if len(out) == 0 {
		return ""
	}
	return "; probe points: " + strings.Join(out, ", ")
}

// EnableDriverLaunches probes the driver's launch functions in process pid
// from now on. why says what showed that it launches through the driver.
func (a *Attacher) EnableDriverLaunches(pid int, why string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.driverIn[pid] != "" || a.allDriverLaunches || a.agentIn[pid] {
		return nil
	}
	a.driverIn[pid] = why
	// The flag first: the runtime launches of the process then record
	// their frames before any driver launch probe can fire.
	if err := a.markPID(pid, gesPIDTraced|gesPIDDriverLaunch); err != nil {
		return err
	}
	for _, o := range a.objs {
		k := objPID{o.id, pid}
		if len(o.launch.syms) == 0 || !a.attached[k] || a.launchOn[k] {
			continue
		}
		ls, err := a.attachList(o, &o.launch, pid)
		if err != nil {
			return err
		}
		a.launchLinks[pid] = append(a.launchLinks[pid], ls...)
		a.launchOn[k] = true
		a.probes += len(o.launch.syms)
	}
	return nil
}

// LaunchesFromAgent makes process pid's kernel launches come from the gpubpf
// agent loaded in it: no launch function is probed there from now on. Call
// it before AttachProcess.
func (a *Attacher) LaunchesFromAgent(pid int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.agentIn[pid] = true
}

// SwitchLaunchesToAgent hands process pid's kernel launches over to the
// gpubpf agent that now reports them (a command started with the agent
// preloaded, once its launch events are on): it detaches the process's
// launch probes, runtime and driver, and no rescan or newly mapped object
// probes them there again. Allocations, copies, graph launches and kernel
// lookups keep their probes. It returns how many links it closed; closing
// waits for the kernel to finish the probes' handlers, so once it returns
// no launch event of the process enters the BPF ring any more.
func (a *Attacher) SwitchLaunchesToAgent(pid int) int {
	a.mu.Lock()
	a.agentIn[pid] = true
	ls := a.launchLinks[pid]
	delete(a.launchLinks, pid)
	a.mu.Unlock()
	// Outside the lock: each close waits for an RCU grace period, and a
	// kernel lookup may need the lock meanwhile (EnableDriverLaunches).
	links.CloseAll(ls)
	return len(ls)
}

// DriverLaunchesIn says whether (and why) the driver's launch functions are
// probed in process pid.
func (a *Attacher) DriverLaunchesIn(pid int) (string, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.allDriverLaunches {
		return "all processes", true
	}
	why, ok := a.driverIn[pid]
	return why, ok
}

// Flags of the BPF pids map (GES_PID_*).
const (
	gesPIDTraced       = 1
	gesPIDDriverLaunch = 2
)

// probeList is the functions of one object to probe, with their cookies.
type probeList struct {
	syms    []string
	offs    []uint64 // file offsets of the probe points
	cookies []uint64
	notes   []string
}

func (l *probeList) add(sym string, off, cookie uint64, note string) {
	l.syms = append(l.syms, sym)
	l.offs = append(l.offs, off)
	l.cookies = append(l.cookies, cookie)
	l.notes = append(l.notes, note)
}

// returns lists the functions of l whose return is probed.
func (l *probeList) returns() *probeList {
	r := &probeList{}
	for i, c := range l.cookies {
		if c&cEntryOnly == 0 {
			r.add(l.syms[i], l.offs[i], c, l.notes[i])
		}
	}
	return r
}

// attachList attaches the probes of l in process pid (0: all). On error,
// what this call attached is detached again.
func (a *Attacher) attachList(o *object, l *probeList, pid int) ([]link.Link, error) {
	if len(l.syms) == 0 {
		return nil, nil
	}
	if a.mode == modeSession {
		ln, err := attachSession(a.session, o.host, l, pid)
		if err != nil {
			return nil, fmt.Errorf("attaching uprobe sessions to %d functions in %s: %w", len(l.syms), o.shown, err)
		}
		return []link.Link{ln}, nil
	}
	ex, err := link.OpenExecutable(o.host)
	if err != nil {
		return nil, fmt.Errorf("cannot open %s for uprobes: %w", o.shown, err)
	}
	// Return probes first: a thread entering between the two attachments
	// then only produces a return without entry, which the BPF side
	// ignores, never an entry whose return is lost (that would hold the
	// thread's in-flight record and fold its later calls away).
	var done []link.Link
	for _, step := range []struct {
		l   *probeList
		ret bool
	}{{l.returns(), true}, {l, false}} {
		ls, err := a.attachLinks(ex, step.l, step.ret, pid, o.shown)
		if err != nil {
			links.CloseAll(done)
			return nil, err
		}
		done = append(done, ls...)
	}
	return done, nil
}

// attachLinks attaches the entry or the return program to every function
// of l: as one uprobe_multi link where the kernel has them, else one link
// per function.
func (a *Attacher) attachLinks(ex *link.Executable, l *probeList, ret bool, pid int, shown string) ([]link.Link, error) {
	if len(l.syms) == 0 {
		return nil, nil
	}
	kind, prog := "uprobe", a.enter
	if ret {
		kind, prog = "uretprobe", a.exit
	}
	if a.mode == modeMulti {
		attach := ex.UprobeMulti
		if ret {
			attach = ex.UretprobeMulti
		}
		ml, err := attach(nil, prog, &link.UprobeMultiOptions{Addresses: l.offs, Cookies: l.cookies, PID: uint32(pid)})
		if err != nil {
			return nil, fmt.Errorf("attaching %ss to %d functions in %s: %w", kind, len(l.syms), shown, err)
		}
		return []link.Link{ml}, nil
	}
	var done []link.Link
	for i, sym := range l.syms {
		attach := ex.Uprobe
		if ret {
			attach = ex.Uretprobe
		}
		pl, err := attach(sym, prog, &link.UprobeOptions{Address: l.offs[i], Cookie: l.cookies[i], PID: pid})
		if err != nil {
			links.CloseAll(done)
			return nil, fmt.Errorf("attaching a %s to %s in %s: %w", kind, sym, shown, err)
		}
		done = append(done, pl)
	}
	return done, nil
}

// uprobeMultiAttr is the uprobe_multi member of union bpf_attr for
// BPF_LINK_CREATE. cilium/ebpf v0.22 creates uprobe_multi links but not
// sessions (attach type BPF_TRACE_UPROBE_SESSION), so the tool makes that
// one call itself.
type uprobeMultiAttr struct {
	progFd, targetFd, attachType, flags uint32
	path, offsets, refCtrOffsets        uint64
	cookies                             uint64
	count, multiFlags, pid              uint32
	_                                   uint32
}

const (
	bpfLinkCreate           = 28
	attachTraceUprobeSess   = 57 // BPF_TRACE_UPROBE_SESSION, kernel 6.13
	ebpfAttachUprobeSession = ebpf.AttachType(attachTraceUprobeSess)
)

// attachSession attaches the session program to every function of l in
// one link.
func attachSession(prog *ebpf.Program, hostPath string, l *probeList, pid int) (link.Link, error) {
	path, err := unix.BytePtrFromString(hostPath)
	if err != nil {
		return nil, err
	}
	attr := uprobeMultiAttr{
		progFd:     uint32(prog.FD()),
		attachType: attachTraceUprobeSess,
		path:       uint64(uintptr(unsafe.Pointer(path))),
		offsets:    uint64(uintptr(unsafe.Pointer(&l.offs[0]))),
		cookies:    uint64(uintptr(unsafe.Pointer(&l.cookies[0]))),
		count:      uint32(len(l.offs)),
		pid:        uint32(pid),
	}
	fd, _, errno := unix.Syscall(unix.SYS_BPF, bpfLinkCreate, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	// attr holds them as integers, which the garbage collector does not
	// see: they must live until the kernel has read them.
	runtime.KeepAlive(path)
	runtime.KeepAlive(l.offs)
	runtime.KeepAlive(l.cookies)
	if errno != 0 {
		return nil, errno
	}
	return link.NewFromFD(int(fd))
}

// Objects lists what has been attached.
func (a *Attacher) Objects() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]string, len(a.objs))
	for i, o := range a.objs {
		out[i] = o.shown
	}
	return out
}

// Probes is how many functions carry probes (counting each process's links).
func (a *Attacher) Probes() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.probes
}

// Close detaches everything.
func (a *Attacher) Close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	links.CloseAll(a.links)
	a.links = nil
	for pid, ls := range a.launchLinks {
		links.CloseAll(ls)
		delete(a.launchLinks, pid)
	}
}

// AttachProcess attaches to the CUDA libraries pid maps now and to its
// executable when it defines CUDA APIs itself (static cudart), in that
// process only unless global, and probes the driver's launch functions
// there if an object it maps may call them. It returns the number of
// objects of the process that carry probes (new or earlier).
func (a *Attacher) AttachProcess(pid int, global bool, logf func(string, ...any)) (int, error) {
	ms, err := procmaps.Read(pid)
	if err != nil {
		return 0, err
	}
	linkPID := pid
	if global {
		linkPID = 0
	}
	found := 0
	cands := ms.Matching(isCUDALib)
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	exe = strings.TrimSuffix(exe, " (deleted)")
	if err == nil {
		cands = append([]string{exe}, cands...)
	}
	for _, p := range cands {
		hp := procmaps.HostPath(pid, p)
		n, err := a.Attach(hp, p, linkPID)
		if err != nil {
			if isCUDALib(p) {
				logf("%v", err)
			}
			continue
		}
		if n > 0 {
			logf("attached %d probes to %s (process %d)%s", n, p, pid, a.pointNotes(hp))
		}
		if id, err := statID(hp); err == nil {
			a.mu.Lock()
			if a.attached[objPID{id, 0}] || a.attached[objPID{id, linkPID}] {
				found++
			}
			a.mu.Unlock()
		}
	}
	if !global && found > 0 {
		var objs []string
		for _, m := range ms {
			if m.File() && m.Exec() {
				objs = append(objs, m.Path)
			}
		}
		a.checkDriverLaunches(pid, objs, logf)
	}
	return found, nil
}

// checkDriverLaunches probes the driver's launch functions in process pid
// if one of objs (paths as pid sees them) may call them.
func (a *Attacher) checkDriverLaunches(pid int, objs []string, logf func(string, ...any)) {
	if _, on := a.DriverLaunchesIn(pid); on {
		return
	}
	seen := map[string]bool{}
	for _, p := range objs {
		if seen[p] {
			continue
		}
		seen[p] = true
		if why := a.launchesThroughDriver(procmaps.HostPath(pid, p), p); why != "" {
			if err := a.EnableDriverLaunches(pid, why); err != nil {
				logf("probing the driver's launch functions in process %d: %v", pid, err)
				return
			}
			logf("probing the driver's launch functions in process %d: %s", pid, why)
			return
		}
	}
}

// launchesThroughDriver says why an object may call the driver's launch
// functions itself, or "" if it cannot (as far as its ELF file tells).
func (a *Attacher) launchesThroughDriver(hostPath, shown string) string {
	if isCuda(shown) || isCudart(shown) {
		return "" // the driver itself; cudart's driver launches are its runtime launches
	}
	if isAgentLib(shown) {
		// The gpubpf agent defines the driver's launch functions to relay
		// every caller's launches, cudart's included: no sign of the
		// program's own.
		return ""
	}
	in := a.infoAt(hostPath)
	if in == nil {
		return ""
	}
	base := filepath.Base(shown)
	staticCudart := false
	for i := range apis {
		api := &apis[i]
		if _, ok := in.funcs[api.Name]; !ok {
			continue
		}
		if api.isDriverLaunch() {
			// The driver linked into the program (the test stand-ins):
			// its callers cannot be told apart.
			return base + " defines " + api.Name
		}
		if !api.Driver {
			staticCudart = true
		}
	}
	if len(in.imports) > 0 {
		return base + " imports " + in.imports[0]
	}
	// A static cudart names every driver entry point it looks up; that
	// alone is no sign of driver launches of the program's own.
	if in.mentions && !staticCudart {
		return base + " looks up cuLaunchKernel* by name"
	}
	return ""
}

// definesDriverLaunch names a driver launch function the ELF object at
// hostPath defines itself ("" if none): a driver linked into a program
// rather than libcuda's (the tests' static stand-in).
func (a *Attacher) definesDriverLaunch(hostPath string) string {
	in := a.infoAt(hostPath)
	if in == nil {
		return ""
	}
	for i := range apis {
		if _, ok := in.funcs[apis[i].Name]; ok && apis[i].isDriverLaunch() {
			return apis[i].Name
		}
	}
	return ""
}

// PrepareCommand probes, before a command's exec, its executable (static
// cudart) and the CUDA libraries it may load, in its process only, and
// decides from the executable and the libraries it links whether its driver
// launches are probed from the start.
func (a *Attacher) PrepareCommand(pid int, exe string, logf func(string, ...any)) {
	if exe != "" {
		if n, err := a.Attach(exe, exe, pid); err == nil && n > 0 {
			logf("attached %d probes to %s (static cudart)%s", n, exe, a.pointNotes(exe))
		}
	}
	for _, lib := range systemLibraries(runpathDirs(exe)) {
		if n, err := a.Attach(lib, lib, pid); err != nil {
			logf("%v", err)
		} else if n > 0 {
			logf("attached %d probes to %s%s", n, lib, a.pointNotes(lib))
		}
	}
	if exe != "" {
		a.checkDriverLaunches(pid, append([]string{exe}, a.neededClosure(exe)...), logf)
	}
}

// neededClosure resolves the libraries an executable links, directly or
// through each other, as the dynamic linker would find them (RUNPATH, the
// linker cache, LD_LIBRARY_PATH, the default directories), so that a
// program linking cuBLAS has its driver launches probed before it runs.
func (a *Attacher) neededClosure(exe string) []string {
	cache, _ := ldconfigCache()
	var out []string
	seen := map[string]bool{}
	queue := []string{exe}
	for len(queue) > 0 && len(out) < 300 {
		obj := queue[0]
		queue = queue[1:]
		id, err := statID(obj)
		if err != nil {
			continue
		}
		in, err := a.info(id, obj)
		if err != nil {
			continue
		}
		dirs := expandOrigin(in.runpath, obj)
		dirs = append(dirs, filepath.SplitList(os.Getenv("LD_LIBRARY_PATH"))...)
		for _, name := range in.needed {
			p := resolveLib(name, dirs, cache)
			if p == "" || seen[p] {
				continue
			}
			seen[p] = true
			out = append(out, p)
			queue = append(queue, p)
		}
	}
	return out
}

func resolveLib(name string, dirs []string, cache map[string]string) string {
	if strings.Contains(name, "/") {
		return name
	}
	for _, d := range dirs {
		if d == "" {
			continue
		}
		if p := filepath.Join(d, name); fileExists(p) {
			return p
		}
	}
	if p, ok := cache[name]; ok {
		return p
	}
	for _, d := range []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"} {
		if p := filepath.Join(d, name); fileExists(p) {
			return p
		}
	}
	return ""
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

func expandOrigin(paths []string, obj string) []string {
	var out []string
	for _, v := range paths {
		for _, d := range filepath.SplitList(v) {
			d = strings.ReplaceAll(d, "$ORIGIN", filepath.Dir(obj))
			d = strings.ReplaceAll(d, "${ORIGIN}", filepath.Dir(obj))
			out = append(out, d)
		}
	}
	return out
}

var (
	ldcacheOnce sync.Once
	ldcache     map[string]string
	ldcacheAll  []string
)

// ldconfigCache maps the library names of the dynamic linker's cache
// (ldconfig -p) to their paths, and lists every path; x86-64 entries only.
func ldconfigCache() (map[string]string, []string) {
	ldcacheOnce.Do(func() {
		ldcache = map[string]string{}
		for _, ldconfig := range []string{"/sbin/ldconfig", "/usr/sbin/ldconfig", "ldconfig"} {
			out, err := exec.Command(ldconfig, "-p").Output()
			if err != nil {
				continue
			}
			sc := bufio.NewScanner(strings.NewReader(string(out)))
			for sc.Scan() {
				lhs, p, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=> ")
				name, arch, _ := strings.Cut(lhs, " ")
				if !ok || !strings.Contains(arch, "x86-64") {
					continue
				}
				p = strings.TrimSpace(p)
				ldcacheAll = append(ldcacheAll, p)
				if _, dup := ldcache[name]; !dup {
					ldcache[name] = p
				}
			}
			break
		}
	})
	return ldcache, ldcacheAll
}

// systemLibraries lists CUDA runtime and driver libraries installed where
// the dynamic linker looks: its cache (ldconfig -p), LD_LIBRARY_PATH and the
// usual CUDA toolkit directories. Probing them before a program starts means
// its first call is seen.
func systemLibraries(extraDirs []string) []string {
	var out []string
	seen := map[string]bool{}
	add := func(p string) {
		if p == "" || seen[p] || !isCUDALib(p) || !fileExists(p) {
			return
		}
		seen[p] = true
		out = append(out, p)
	}
	_, cached := ldconfigCache()
	for _, p := range cached {
		add(p)
	}
	dirs := append([]string(nil), extraDirs...)
	dirs = append(dirs, filepath.SplitList(os.Getenv("LD_LIBRARY_PATH"))...)
	globs, _ := filepath.Glob("/usr/local/cuda*/lib64")
	dirs = append(dirs, globs...)
	globs, _ = filepath.Glob("/usr/local/cuda*/targets/*/lib")
	dirs = append(dirs, globs...)
	dirs = append(dirs, "/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib/wsl/lib")
	for _, d := range dirs {
		if d == "" {
			continue
		}
		for _, pat := range []string{"libcudart.so*", "libcuda.so*"} {
			ms, _ := filepath.Glob(filepath.Join(d, pat))
			for _, m := range ms {
				add(m)
			}
		}
	}
	sort.Strings(out)
	return out
}

// runpathDirs returns an executable's DT_RUNPATH/DT_RPATH directories with
// $ORIGIN expanded, where a -cudart shared program may find libcudart.
func runpathDirs(exe string) []string {
	f, err := elf.Open(exe)
	if err != nil {
		return nil
	}
	defer f.Close()
	var rp []string
	for _, tag := range []elf.DynTag{elf.DT_RUNPATH, elf.DT_RPATH} {
		v, _ := f.DynString(tag)
		rp = append(rp, v...)
	}
	return expandOrigin(rp, exe)
}

var errNoCUDA = errors.New("no CUDA library found")
