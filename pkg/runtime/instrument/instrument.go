package instrument

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/gpubpf/gpubpf/pkg/runtime/ptx"
)

// Probe is a probe function made by the compiler.
type Probe struct {
	Func       string // name of the probe .func
	PTX        string // its definition (and helper funcs), no .version/.target header
	UsesCtx    bool   // if false the probe gets ctx = 0 and no context is built
	PTXVersion [2]int // minimum .version the probe needs
	// CtxBytes is how many bytes of ctx the probe may access (the
	// compiler's Function.CtxBytes). Its ctx buffer is made at least this
	// big, the part past the kernel's parameters (or past the memory
	// record) zero-filled, so that a probe reading further than they go
	// stays inside it. 0 sizes the buffer for the parameters (the record)
	// alone, as for a hand-written probe that reads no further.
	CtxBytes int
	// Inline, when set, returns the probe's body as a PTX block to paste
	// at a site instead of calling Func (ptxas does not inline calls: a
	// call costs a CALL and spills even for an empty probe). ctx is a
	// register or "0"; uniq is a label prefix unique in the module. PTX
	// must still be placed at module scope for the helpers the body calls.
	Inline func(Site) string
	// SiteTime, with Inline, asks each site to read %globaltimer into
	// Site.Time before anything else of the probe runs, even its guard
	// branch: lanes of a diverged warp then each get the time they
	// reached the site, not the time the warp got round to their path.
	SiteTime bool
	// LaunchWords: the probe reads the launch words (bpf_gpu_launch_word),
	// so every kernel of the clone takes them as two hidden trailing
	// .u64 parameters (Result.Launch says where) the agent fills per launch.
	LaunchWords bool
	// EntryTime: the probe reads the thread's time at its kernel's entry
	// (bpf_gpu_entry_time), so every kernel of the clone reads
	// %globaltimer into a register first thing (Site.EntryTime).
	EntryTime bool
}

// LaunchLayout says where a clone's hidden launch parameters are: after
// the kernel's own Params parameters, at byte BufOffset of the packed
// parameter buffer.
type LaunchLayout struct {
	Params    int
	BufOffset int
}

// Site is where an inlined probe body is pasted.
type Site struct {
	Ctx    string // register holding the ctx pointer, or "0"
	Uniq   string // label prefix unique in the module
	Kernel string // mangled name of the kernel, "" in a .func several kernels may call
	Time   string // with Probe.SiteTime: the register holding the site's time
	// Launch holds the registers with the launch words (Probe.LaunchWords),
	// "" in a .func, where the kernel's parameters are out of reach.
	Launch [2]string
	// EntryTime holds the thread's time at its kernel's entry
	// (Probe.EntryTime), "" in a .func.
	EntryTime string
}

// Request says what to instrument and how.
type Request struct {
	// Kernels are selection patterns: mangled, demangled or glob
	// (`vectorAdd`, `*Add*`, `_Z9vectorAddPKfS0_Pfi`). Empty selects all.
	Kernels                []string
	Entry, Exit, MemAccess *Probe
	// Globals maps the original module's variable names to their device
	// addresses (cuModuleGetGlobal/cuLibraryGetGlobal). nil keeps the
	// clone's own copies (offline checks only).
	Globals map[string]uint64
	// ResolveGlobals, when set, is asked for the addresses of the module
	// variables (global and const space) the clone uses, once they are
	// known; its answer takes Globals' place.
	ResolveGlobals func(names []string) (map[string]uint64, error)
	// MaxPTX is the highest PTX ISA version the driver accepts ({0,0}: no limit).
	MaxPTX [2]int
	// Dump, if set, receives the JSON description of every pass's input and
	// output (for debugging, see PassDump).
	Dump func(PassDump)
}

// PassDump is one pass's input and output PTX.
type PassDump struct {
	Pass   string `json:"pass"`
	Input  string `json:"input"`
	Output string `json:"output"`
}

// JSON returns the dump as one JSON line.
func (d PassDump) JSON() string { b, _ := json.Marshal(d); return string(b) }

// Result is the instrumented clone.
type Result struct {
	PTX     string
	Kernels []string          // instrumented kernels (mangled), in the clone
	Funcs   []string          // .funcs copied along
	Skipped map[string]string // kernel -> why it was not instrumented
	Aliased map[string]uint64 // variables now referenced through the original's address
	Fresh   []string          // variables the clone keeps its own copy of (initialised data)
	Version [2]int            // .version of the clone
	Sites   Sites
	Notes   []string
	// Launch: the hidden launch parameters of each kernel, when a probe
	// reads the launch words (nil otherwise).
	Launch map[string]LaunchLayout
}

// Instrument builds the instrumented clone of src for req.
func Instrument(src string, req Request) (*Result, error) {
	// Bodies are parsed only for the kernels and functions the clone keeps.
	m, err := ptx.ParseLazy(src)
	if err != nil {
		return nil, fmt.Errorf("parsing the module's PTX: %w", err)
	}
	return InstrumentModule(m, req)
}

// InstrumentModule is Instrument on a parsed module. The module is not
// modified, except that bodies left unparsed by ptx.ParseLazy get parsed
// (so do not instrument one module from several goroutines at once).
func InstrumentModule(m *ptx.Module, req Request) (*Result, error) {
	var all []string
	for _, k := range m.Entries() {
		all = append(all, k.Name)
	}
	if len(all) == 0 {
		return nil, fmt.Errorf("the PTX module defines no kernels (.entry)")
	}
	sel := all
	if len(req.Kernels) > 0 {
		var closest []string
		sel, closest = Match(req.Kernels, all)
		if len(sel) == 0 {
			msg := fmt.Sprintf("no kernel of the module matches %s", strings.Join(req.Kernels, ", "))
			if len(closest) > 0 {
				msg += "; closest: " + strings.Join(demangledList(closest), ", ")
			}
			return nil, fmt.Errorf("%s (the module has %d kernels)", msg, len(all))
		}
	}
	if req.Entry == nil && req.Exit == nil && req.MemAccess == nil {
		return nil, fmt.Errorf("no probe given: set Entry, Exit or MemAccess")
	}
	if m.Version == [2]int{} || len(m.Target) == 0 {
		return nil, fmt.Errorf("the PTX module has no .version or .target directive: not a complete module")
	}
	if m.AddressSize == 32 {
		return nil, fmt.Errorf("32-bit PTX (.address_size 32) is not supported")
	}
	// A probe that reads ctx needs every parameter's size to lay out the
	// kernelParams copy; kernels with a parameter we cannot size are left
	// out (and said so) rather than handed a wrong layout.
	skipped := map[string]string{}
	if (req.Entry != nil && req.Entry.UsesCtx) || (req.Exit != nil && req.Exit.UsesCtx) {
		funcs := m.Funcs()
		var keep []string
		for _, k := range sel {
			why := ""
			for _, p := range funcs[k].Params {
				if p.Size() == 0 {
					why = fmt.Sprintf("parameter %q has a type whose size is unknown, so the probe's ctx cannot follow CUDA's kernelParams layout", p.Text)
					break
				}
			}
			if why != "" {
				skipped[k] = why
			} else {
				keep = append(keep, k)
			}
		}
		if len(keep) == 0 {
			return nil, fmt.Errorf("no selected kernel can be instrumented: %v", skipped)
		}
		sel = keep
	}
	dump := func(name string, c *Clone, before string) {
		if req.Dump != nil {
			req.Dump(PassDump{Pass: name, Input: before, Output: c.String()})
		}
	}
	c, err := Extract(m, sel, req.Entry != nil)
	if err != nil {
		return nil, err
	}
	if req.ResolveGlobals != nil {
		var names []string
		for _, v := range c.Vars {
			if v.Space == "global" || v.Space == "const" {
				names = append(names, v.Name)
			}
		}
		if len(names) > 0 {
			g, err := req.ResolveGlobals(names)
			if err != nil {
				return nil, err
			}
			req.Globals = g
		}
	}
	c.inline = map[string]*Probe{}
	for _, p := range []*Probe{req.Entry, req.Exit, req.MemAccess} {
		if p != nil && p.Inline != nil {
			c.inline[p.Func] = p
		}
		c.launchWords = c.launchWords || p != nil && p.LaunchWords
		c.entryTime = c.entryTime || p != nil && p.EntryTime
	}
	before := ""
	if req.Dump != nil {
		before = c.String()
	}
	step := func(name string, fn func() error) error {
		if req.Dump != nil {
			before = c.String()
		}
		if err := fn(); err != nil {
			return err
		}
		dump(name, c, before)
		return nil
	}
	steps := []struct {
		name string
		fn   func() error
	}{
		// Aliasing runs first, over the module's own statements only (the
		// probe calls the other passes add never name module variables).
		// It records the loads it turned from .const into .global so the
		// memory probe still skips them: they are not global accesses of
		// the application.
		{"alias-globals", func() error { return c.AliasGlobals(req.Globals) }},
		{"redirect-stubs", func() error { c.RedirectStubs(req.Entry); return nil }},
		{"entry", func() error { c.InsertEntry(req.Entry, req.Exit); return nil }},
		{"exit", func() error { c.InsertExit(req.Exit); return nil }},
		{"mem-access", func() error { c.InsertMemAccess(req.MemAccess); return nil }},
		{"launch-words", func() error { c.AddLaunchWords(); return nil }},
		{"entry-time", func() error { c.AddEntryTime(); return nil }},
		{"add-probes", func() error { return c.AddProbes(req.Entry, req.Exit, req.MemAccess) }},
		{"fix-header", func() error { return c.FixHeader(req.MaxPTX) }},
		{"declare-temps", func() error { c.finish(); return nil }},
	}
	for _, s := range steps {
		if err := step(s.name, s.fn); err != nil {
			return nil, fmt.Errorf("pass %s on kernels %s: %w", s.name, strings.Join(sel, ", "), err)
		}
	}
	r := &Result{
		PTX:     c.String(),
		Kernels: c.KernelNames(),
		Funcs:   c.FuncNames(),
		Skipped: skipped,
		Aliased: c.Aliased,
		Fresh:   c.Fresh,
		Version: c.M.Version,
		Sites:   c.Sites,
		Notes:   c.Notes,
		Launch:  c.launch,
	}
	for k := range c.stubbed {
		if req.Entry != nil {
			r.Notes = append(r.Notes, fmt.Sprintf("%s calls a probe stub: entry probe runs there, not at entry", k))
		}
	}
	sort.Strings(r.Notes)
	return r, nil
}

// String prints the clone's PTX.
func (c *Clone) String() string { return c.M.String() }

func demangledList(ks []string) []string {
	out := make([]string, len(ks))
	for i, k := range ks {
		base, _ := names(k)
		if base != k {
			out[i] = base + " (" + k + ")"
		} else {
			out[i] = k
		}
	}
	return out
}
