package gpuevent_snoop

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/features"
)

// launchSampleMask: under sessions one launch in 64 per CPU also has its
// return taken, so that launch times in the summary are an estimate over
// many launches rather than over first launches (which include module
// loading). It costs a return probe per 64 launches.
const launchSampleMask = 63

// snoopObjects is the loaded BPF object: the maps, and either the session
// program or the entry/return pair.
type snoopObjects struct {
	gpueventsnoopMaps
	Session     *ebpf.Program
	Enter, Exit *ebpf.Program
}

func (o *snoopObjects) Close() {
	o.gpueventsnoopMaps.Close()
	for _, p := range []*ebpf.Program{o.Session, o.Enter, o.Exit} {
		if p != nil {
			p.Close()
		}
	}
}

// loadObjects loads the BPF programs for the best way the kernel offers to
// attach them: uprobe_multi sessions (6.13+), uprobe_multi links (6.6+), or
// one perf-event uprobe per function. GPUEVENT_SNOOP_SINGLE_UPROBES and
// GPUEVENT_SNOOP_NO_SESSIONS force the older ways (tests, comparisons).
func loadObjects(spec *ebpf.CollectionSpec) (*snoopObjects, attachMode, error) {
	multi := features.HaveBPFLinkUprobeMulti() == nil && os.Getenv("GPUEVENT_SNOOP_SINGLE_UPROBES") == ""
	if multi && spec.Programs["ges_session"] != nil && os.Getenv("GPUEVENT_SNOOP_NO_SESSIONS") == "" {
		var o struct {
			gpueventsnoopMaps
			Session *ebpf.Program `ebpf:"ges_session"`
		}
		s := spec.Copy()
		s.Programs["ges_session"].AttachType = ebpfAttachUprobeSession
		delete(s.Programs, "ges_enter")
		delete(s.Programs, "ges_exit")
		if err := s.LoadAndAssign(&o, nil); err == nil {
			objs := &snoopObjects{gpueventsnoopMaps: o.gpueventsnoopMaps, Session: o.Session}
			if sessionsWork(o.Session) {
				return objs, modeSession, nil
			}
			objs.Close()
		}
	}
	var o struct {
		gpueventsnoopMaps
		Enter *ebpf.Program `ebpf:"ges_enter"`
		Exit  *ebpf.Program `ebpf:"ges_exit"`
	}
	s := spec.Copy()
	delete(s.Programs, "ges_session")
	mode := modeSingle
	if multi {
		mode = modeMulti
		s.Programs["ges_enter"].AttachType = ebpf.AttachTraceUprobeMulti
		s.Programs["ges_exit"].AttachType = ebpf.AttachTraceUprobeMulti
	}
	if err := s.LoadAndAssign(&o, nil); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, 0, fmt.Errorf("the kernel refused the BPF program (kernel 5.15+ with uprobe BPF cookies is needed): %+v", ve)
		}
		return nil, 0, fmt.Errorf("loading the BPF program into the kernel: %w", err)
	}
	return &snoopObjects{gpueventsnoopMaps: o.gpueventsnoopMaps, Enter: o.Enter, Exit: o.Exit}, mode, nil
}

// sessionsWork attaches the session program to this tool's own entry point
// (which never runs again) and detaches it: a kernel that loads the program
// may still refuse the link.
func sessionsWork(prog *ebpf.Program) bool {
	f, err := elf.Open("/proc/self/exe")
	if err != nil {
		return false
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 && f.Entry >= p.Vaddr && f.Entry < p.Vaddr+p.Filesz {
			l := &probeList{}
			l.add("_start", f.Entry-p.Vaddr+p.Off, 0, "")
			ln, err := attachSession(prog, "/proc/self/exe", l, os.Getpid())
			if err != nil {
				return false
			}
			ln.Close()
			return true
		}
	}
	return false
}
