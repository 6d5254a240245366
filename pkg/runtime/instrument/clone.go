package instrument

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/gpubpf/gpubpf/pkg/runtime/ptx"
)

// Clone is the module being built: a new ptx.Module holding copies of the
// selected kernels and the functions and variables they reference.
type Clone struct {
	// inline holds the probes pasted in (those with an Inline hook), by
	// .func name.
	inline  map[string]*Probe
	inlined int
	// launchWords: kernels take the hidden launch parameters; launch says
	// where, per kernel (AddLaunchWords).
	launchWords bool
	// entryTime: kernels read %globaltimer into entryTimeReg first thing
	// (AddEntryTime).
	entryTime bool
	launch    map[string]LaunchLayout
	// inEntry: the pass now works in a kernel, where its parameters (and
	// so the launch words) can be read.
	inEntry bool
	// site is the kernel the pass now works in ("" inside a .func that
	// several kernels may call): what a probe's kernel index is there.
	site    string
	M       *ptx.Module
	Kernels []*ptx.Func // selected kernels (copies)
	Funcs   []*ptx.Func // defined .funcs they call (copies)
	Vars    []*ptx.Var  // module variables they reference
	// Aliased maps variable names to the address references now use.
	Aliased map[string]uint64
	// Fresh lists variables the clone keeps its own copy of.
	Fresh []string
	Notes []string
	Sites Sites

	stubbed map[string]bool // kernels whose stub calls were redirected
	temps   map[*ptx.Func]*temps
	label   int
	probes  []*Probe
	calls   map[string]*ptx.Stmt // shared call instruction per probe
	slab    []ptx.Stmt           // see ins
	// fromConst marks loads AliasGlobals turned from .const into .global.
	fromConst map[*ptx.Stmt]bool
	opSlab    []string
	// zeroCtx: bytes of the zero-filled ctx buffer a .func declares for
	// the probes it calls, where the kernel's parameters are out of reach.
	zeroCtx map[*ptx.Func]int
}

// Sites counts what the passes inserted.
type Sites struct {
	Entry, Exit, Mem, Stub, Globals int
}

// temps allocates scratch registers per function; they are declared at the
// top of the body by finish.
type temps struct{ rd, r, h int }

func (c *Clone) tmp(f *ptx.Func, kind string) string {
	t := c.temps[f]
	if t == nil {
		t = &temps{}
		c.temps[f] = t
	}
	switch kind {
	case "rd":
		t.rd++
		return "%gpubpf_rd" + strconv.Itoa(t.rd)
	case "r":
		t.r++
		return "%gpubpf_r" + strconv.Itoa(t.r)
	}
	t.h++
	return "%gpubpf_h" + strconv.Itoa(t.h)
}

func (c *Clone) newLabel() string {
	c.label++
	return fmt.Sprintf("$gpubpf_L%d", c.label)
}

// isStub reports whether a called function is a probe stub. bpftime's own
// examples declare the stub without extern "C", so its PTX name is mangled
// (_Z28__bpftime_cuda__kernel_tracev): compare demangled base names.
func isStub(name string) bool {
	if strings.HasPrefix(name, "_Z") {
		name, _ = names(name)
	}
	return name == "__bpftime_cuda__kernel_trace" || strings.HasPrefix(name, "__gpubpf_hook_")
}

// Extract starts a clone with the named kernels (mangled names) and,
// transitively, every function and variable they reference. When skipStubs
// is set, stub functions are left out (their calls will be redirected).
func Extract(m *ptx.Module, kernels []string, skipStubs bool) (*Clone, error) {
	funcs := m.Funcs()
	vars := m.Vars()
	c := &Clone{
		M:       &ptx.Module{Version: m.Version, AddressSize: m.AddressSize},
		Aliased: map[string]uint64{},
		stubbed: map[string]bool{},
		temps:   map[*ptx.Func]*temps{},
		calls:   map[string]*ptx.Stmt{},

		fromConst: map[*ptx.Stmt]bool{},
		zeroCtx:   map[*ptx.Func]int{},
	}
	// "debug" in .target demands DWARF sections the clone does not carry.
	for _, t := range m.Target {
		if t != "debug" {
			c.M.Target = append(c.M.Target, t)
		}
	}
	if m.AddressSize == 0 {
		c.M.AddressSize = 64
	}
	keepF := map[string]bool{}
	keepV := map[string]bool{}
	var work []*ptx.Func
	for _, k := range kernels {
		f := funcs[k]
		if f == nil || !f.Entry || !f.Defined {
			return nil, fmt.Errorf("kernel %s is not defined in this PTX module", k)
		}
		if !keepF[k] {
			keepF[k] = true
			work = append(work, f)
		}
	}
	visit := func(text string) {
		ptx.Idents(text, func(n string, _ int) {
			if g := funcs[n]; g != nil && !keepF[n] {
				if skipStubs && isStub(n) {
					return
				}
				keepF[n] = true
				work = append(work, g)
			} else if v := vars[n]; v != nil && !keepV[n] {
				keepV[n] = true
				// Initializers can name other variables or functions
				// (generic(sym) in vtables and pointer tables).
				if v.HasInit {
					_, init, _ := strings.Cut(v.Text, "=")
					ptx.Idents(init, func(n2 string, _ int) {
						if funcs[n2] != nil && !keepF[n2] {
							keepF[n2] = true
							work = append(work, funcs[n2])
						} else if vars[n2] != nil {
							keepV[n2] = true
						}
					})
				}
			}
		})
	}
	for len(work) > 0 {
		f := work[len(work)-1]
		work = work[:len(work)-1]
		if err := f.Load(); err != nil {
			return nil, fmt.Errorf("function %s: %w", f.Name, err)
		}
		for _, s := range f.Body {
			switch s.Kind {
			case ptx.Instr:
				for _, o := range s.Operands {
					visit(o)
				}
			case ptx.Decl:
				visit(s.Text)
			}
		}
	}
	// Rebuild in source order: PTX needs declarations before uses.
	c.M.Items = append(c.M.Items, header(m)...)
	seenVar := map[string]bool{}
	for _, it := range m.Items {
		switch it := it.(type) {
		case *ptx.Var:
			if keepV[it.Name] && !seenVar[it.Name+fmt.Sprint(it.Extern)] {
				seenVar[it.Name+fmt.Sprint(it.Extern)] = true
				v := *it
				c.M.Items = append(c.M.Items, &v)
				c.Vars = append(c.Vars, &v)
			}
		case *ptx.Func:
			if !keepF[it.Name] {
				continue
			}
			g := copyFunc(it)
			dropDebug(g)
			c.M.Items = append(c.M.Items, g)
			if g.Defined {
				if g.Entry {
					c.Kernels = append(c.Kernels, g)
				} else {
					c.Funcs = append(c.Funcs, g)
				}
			}
		}
	}
	// Keep the requested order for kernels.
	order := map[string]int{}
	for i, k := range kernels {
		order[k] = i
	}
	sort.SliceStable(c.Kernels, func(i, j int) bool { return order[c.Kernels[i].Name] < order[c.Kernels[j].Name] })
	return c, nil
}

// header returns the .version/.target/.address_size items of m.
func header(m *ptx.Module) []ptx.Item {
	var out []ptx.Item
	for _, it := range m.Items {
		if d, ok := it.(*ptx.Directive); ok && d.IsHeader() {
			out = append(out, d)
		}
	}
	return out
}

// dropDebug removes .loc directives: the clone carries no debug sections
// (they describe the whole module), and .loc ... function_name refers to
// labels defined there.
func dropDebug(f *ptx.Func) {
	if f.Body == nil {
		return
	}
	out := f.Body[:0]
	for _, s := range f.Body {
		if s.Kind == ptx.Decl && (strings.HasPrefix(s.Text, ".loc") || strings.HasPrefix(s.Text, ".file")) {
			continue
		}
		out = append(out, s)
	}
	f.Body = out
}

// copyFunc copies a function for the clone. The statements themselves are
// shared with the original module: passes never modify a statement in
// place, they replace it (AliasGlobals copies before rewriting).
func copyFunc(f *ptx.Func) *ptx.Func {
	g := *f
	if f.Body != nil {
		g.Body = append([]*ptx.Stmt(nil), f.Body...)
	}
	return &g
}

// all returns the defined functions of the clone, kernels first.
func (c *Clone) all() []*ptx.Func {
	return append(append([]*ptx.Func{}, c.Kernels...), c.Funcs...)
}

// KernelNames lists the clone's kernels.
func (c *Clone) KernelNames() []string {
	var out []string
	for _, k := range c.Kernels {
		out = append(out, k.Name)
	}
	return out
}

// FuncNames lists the clone's defined .funcs.
func (c *Clone) FuncNames() []string {
	var out []string
	for _, k := range c.Funcs {
		out = append(out, k.Name)
	}
	return out
}
