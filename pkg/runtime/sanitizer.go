package runtime

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gpubpf/gpubpf/pkg/procmaps"
	"github.com/gpubpf/gpubpf/pkg/runtime/agentproto"
	"github.com/gpubpf/gpubpf/pkg/runtime/jit"
	"github.com/gpubpf/gpubpf/pkg/runtime/sanpatch"
)

// The sanitizer path (docs/sanitizer.md, package sanpatch): kernels
// without PTX, patched in place by NVIDIA's Compute Sanitizer to run the
// session's entry and exit programs. This file is only the glue between a
// process's placement of a module and sanpatch.Path.

// wantsSanitizer reports whether a program the session starts should have
// the agent set up the sanitizer (GPUBPF_SANITIZER=on): its GPU programs
// run at kernel entry or exit, and CUPTI, which the sanitizer's
// subscription excludes, is not wanted (launchlate's kernel times).
func (s *Session) wantsSanitizer() bool {
	if s.opts.KernelTimes != KernelTimesOff || os.Getenv("GPUBPF_SANITIZER") != "" {
		return false
	}
	for _, g := range s.gpu {
		if g.Site == SiteEntry || g.Site == SiteExit {
			return true
		}
	}
	return false
}

// sanitize puts module kernels without PTX (each with its probe set) on the
// process's sanitizer path in context t; those it cannot take are skipped
// with the reason.
func (p *Process) sanitize(pm *preparedModule, t agentproto.Target, kernels []string) {
	bySet := map[string][]string{}
	sets := map[string]probeSet{}
	for _, k := range kernels {
		set := pm.sets[k]
		kk := pm.byName[k]
		if len(set.mem) > 0 {
			p.skip(k, kk.Advice()+"; memory-access probes on kernels without PTX are not supported yet")
			continue
		}
		bySet[set.key()] = append(bySet[set.key()], k)
		sets[set.key()] = set
	}
	path := p.sanPath()
	for key, ks := range bySet {
		set := sets[key]
		err := path.Select(key, ks, func() (sanpatch.Program, error) { return p.sanProgram(t, set) })
		if err != nil {
			for _, k := range ks {
				kk := pm.byName[k]
				p.skip(k, kk.Advice()+"; "+err.Error())
			}
			continue
		}
		p.s.mu.Lock()
		for _, k := range ks {
			p.s.stats.KernelsMatched[k] = true
			p.s.stats.KernelsSanitized[k] = true
			delete(p.s.stats.KernelsSkipped, k)
		}
		p.s.mu.Unlock()
		p.s.logf("process %d: %d kernels without PTX on the sanitizer path (%s)", p.PID, len(ks), strings.Join(ks[:min(3, len(ks))], ", "))
	}
}

// sanPath is the process's sanitizer path, made at its first use.
func (p *Process) sanPath() *sanpatch.Path {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.san == nil {
		tag := fmt.Sprintf("%d_%d", os.Getpid(), time.Now().UnixNano()%1_000_000)
		p.san = sanpatch.NewPath(p.conn, p.s, tag, tritonBin(p.PID)...)
	}
	return p.san
}

// sanProgram is the patch module's makings for context t: the programs as
// compiled for its device (their maps are there).
func (p *Process) sanProgram(t agentproto.Target, set probeSet) (sanpatch.Program, error) {
	dev, err := p.device(t)
	if err != nil {
		return sanpatch.Program{}, err
	}
	// the device as the application's start on it was notified (the
	// hello of a program started under the tool lists none yet)
	p.mu.Lock()
	d, ok := p.used[t.Device]
	p.mu.Unlock()
	sm := int(d.Major*10 + d.Minor)
	for _, d := range p.conn.Info().Devices {
		if !ok && d.Ordinal == t.Device {
			sm = int(d.Major*10 + d.Minor)
		}
	}
	if sm == 0 {
		return sanpatch.Program{}, fmt.Errorf("the sanitizer path: device %d's architecture is not known", t.Device)
	}
	fns := func(gs []GPUProgram) []*jit.Function {
		out := make([]*jit.Function, len(gs))
		for i, g := range gs {
			out[i] = dev.funcs[g.Spec.Name]
		}
		return out
	}
	return sanpatch.Program{Entry: fns(set.entry), Exit: fns(set.exit), Arch: fmt.Sprintf("sm_%d", sm), Target: t}, nil
}

// refreshSanitizer reads the agent's account of the sanitizer path: the
// kernel indexes it gave (named before a read of the maps that count by
// them) and its counts, kept for the stats. end also takes the patches
// out, for a program that runs on after the trace.
func (p *Process) refreshSanitizer(end bool) {
	p.mu.Lock()
	path := p.san
	p.mu.Unlock()
	if path == nil || !path.Used() {
		return
	}
	account := path.Account
	if end {
		account = path.End
	}
	if r, err := account(); err == nil {
		p.mu.Lock()
		p.sanAcct = &r
		p.mu.Unlock()
	}
}

// tritonBin is Triton's ptxas folder where the process maps Triton's
// library: on a PyTorch machine without a CUDA toolkit, the one ptxas.
func tritonBin(pid int) []string {
	ms, err := procmaps.Read(pid)
	if err != nil {
		return nil
	}
	for _, o := range ms.Objects() {
		if i := strings.Index(o, "/triton/_C/"); i >= 0 {
			return []string{procmaps.HostPath(pid, filepath.Join(o[:i], "triton", "backends", "nvidia", "bin"))}
		}
	}
	return nil
}
