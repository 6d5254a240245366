package sanpatch

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/gpubpf/gpubpf/pkg/runtime/agentproto"
	"github.com/gpubpf/gpubpf/pkg/runtime/jit"
)

// Agent is what the sanitizer path needs of a process's agent.
type Agent interface {
	Sanitize(*agentproto.SanitizeRequest) (agentproto.SanitizeReply, error)
}

// Indexes hands out kernel indexes (bpf_gpu_kernel_index) for the agent to
// give the kernels that run (agentproto.SanitizeLateIndex), and learns
// which kernel got which.
type Indexes interface {
	ReserveKernelIndexes(n int) []uint32
	NameKernelIndex(i uint32, kernel string)
}

// The agent's pool of indexes is topped up by poolChunk when fewer than
// poolLow are left: indexes set aside early push later kernels past a
// tool's table (threadhist has 64 kernel segments), so a few at a time.
const (
	poolLow   = 8
	poolChunk = 16
)

// Program is what a patch module is built from: the compiled GPU programs
// of one device (their map addresses are that device's) and its SASS
// architecture ("sm_90").
type Program struct {
	Entry, Exit []*jit.Function
	Arch        string
	Target      agentproto.Target
}

// Path is one process's sanitizer path: the patch module, built and sent
// once, and the kernels selected so far. The agent patches one context
// per process, with one set of programs.
type Path struct {
	agent Agent
	idx   Indexes
	tag   string
	dirs  []string

	mu       sync.Mutex
	set      string // key of the programs the module was built from
	sent     bool
	target   agentproto.Target // the context the patch module's maps are in
	poolLeft int               // the agent's pool of indexes, as last known
	err      error             // rules the path out for the process (no sanitizer, no ptxas)
	selected map[string]bool
}

// NewPath returns the path for the process agent serves. tag makes the
// callbacks' names this tool's own (a later tool's patch module is added
// beside it in the same context); ptxasDirs are looked in first for a ptxas
// (Triton's, found in the traced process).
func NewPath(agent Agent, idx Indexes, tag string, ptxasDirs ...string) *Path {
	return &Path{agent: agent, idx: idx, tag: tag, dirs: ptxasDirs, selected: map[string]bool{}}
}

// ErrOtherPrograms refuses kernels whose programs differ from those the
// process's patch module was built from.
var ErrOtherPrograms = errors.New("the sanitizer path runs one set of GPU programs per process, and these kernels' programs differ from the first set's")

// Select puts kernels (mangled names) on the path; each gets its kernel
// index at its first launch. set names their programs; build makes the
// Program when the module is first needed. An error means none of kernels
// was selected; ErrOtherPrograms and a refusal by the agent (no sanitizer
// in the process) say why in words for the user.
func (p *Path) Select(set string, kernels []string, build func() (Program, error)) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return p.err
	}
	if p.set != "" && p.set != set {
		return ErrOtherPrograms
	}
	req := &agentproto.SanitizeRequest{}
	for _, k := range kernels {
		if !p.selected[k] {
			req.Kernels = append(req.Kernels, agentproto.SanitizeKernel{Name: k, Index: agentproto.SanitizeLateIndex})
		}
	}
	if len(req.Kernels) == 0 {
		return nil
	}
	prog, err := build()
	if err != nil {
		return err
	}
	req.Target = prog.Target
	if p.sent && prog.Target != p.target {
		// not for the process: the first device's kernels stay on the path
		return fmt.Errorf("the sanitizer path patches one GPU per process (its programs address that device's maps): device %d's kernels are left out", prog.Target.Device)
	}
	if !p.sent {
		// An agent that cannot patch says why before ptxas is run.
		if r, err := p.account(); err == nil && !r.Ready {
			p.err = fmt.Errorf("the sanitizer path: %s", r.Why)
			return p.err
		}
		if err := p.module(req, prog); err != nil {
			p.err = err
			return err
		}
	}
	req.Pool = p.topUp()
	r, err := p.agent.Sanitize(req)
	if err != nil {
		var refused *agentproto.Error
		if errors.As(err, &refused) && refused.Status == agentproto.StatusUnsupported {
			p.err = fmt.Errorf("the sanitizer path: %s", refused.Message)
			return p.err
		}
		return fmt.Errorf("the sanitizer path: %w", err)
	}
	p.sent, p.set, p.target = true, set, prog.Target
	for _, k := range req.Kernels {
		p.selected[k.Name] = true
	}
	p.learn(r)
	return nil
}

// topUp is what to add to the agent's pool of indexes (p.mu held).
func (p *Path) topUp() []uint32 {
	if p.idx == nil || p.poolLeft >= poolLow {
		return nil
	}
	p.poolLeft += poolChunk
	return p.idx.ReserveKernelIndexes(poolChunk)
}

// learn names the indexes the agent gave (p.mu held).
func (p *Path) learn(r agentproto.SanitizeReply) {
	p.poolLeft = int(r.PoolLeft)
	for _, k := range r.Assigned {
		if p.idx != nil {
			p.idx.NameKernelIndex(k.Index, k.Name)
		}
	}
}

// module builds the patch module into req.
func (p *Path) module(req *agentproto.SanitizeRequest, prog Program) error {
	text, err := Module(prog.Entry, prog.Exit, prog.Arch)
	if err != nil {
		return err
	}
	enter, exit := EnterFunc+"_"+p.tag, ExitFunc+"_"+p.tag
	if strings.Contains(text, EnterFunc) {
		req.Enter = enter
	}
	if strings.Contains(text, ExitFunc) {
		req.Exit = exit
	}
	text = strings.ReplaceAll(strings.ReplaceAll(text, EnterFunc, enter), ExitFunc, exit)
	px, err := FindPtxas(p.dirs...)
	if err != nil {
		return fmt.Errorf("the sanitizer path needs ptxas to assemble its patch module: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cubin, err := px.Compile(ctx, text, prog.Arch)
	if err != nil {
		return err
	}
	req.Patch = cubin
	return nil
}

// Used reports whether a kernel was selected.
func (p *Path) Used() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.selected) > 0
}

// Account reads the agent's account of the path, learns the kernel indexes
// it gave since, and tops its pool up.
func (p *Path) Account() (agentproto.SanitizeReply, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r, err := p.account()
	if err != nil || !p.sent {
		return r, err
	}
	if pool := p.topUp(); pool != nil {
		r2, err := p.agent.Sanitize(&agentproto.SanitizeRequest{Pool: pool})
		if err != nil {
			p.poolLeft -= len(pool)
			return r, nil
		}
		p.learn(r2)
		r.PoolLeft = r2.PoolLeft
	}
	return r, nil
}

func (p *Path) account() (agentproto.SanitizeReply, error) {
	r, err := p.agent.Sanitize(&agentproto.SanitizeRequest{Flags: agentproto.SanitizeAccount})
	if err == nil {
		p.learn(r)
	}
	return r, err
}

// End takes the patches out (the trace ends while the program runs on)
// and returns the final account: no launch runs patched after it, and the
// indexes given up to the end are named.
func (p *Path) End() (agentproto.SanitizeReply, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.sent {
		return p.account()
	}
	r, err := p.agent.Sanitize(&agentproto.SanitizeRequest{Flags: agentproto.SanitizeEnd})
	if err == nil {
		p.learn(r)
	}
	return r, err
}
