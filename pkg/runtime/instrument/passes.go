package instrument

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/gpubpf/gpubpf/pkg/runtime/ptx"
)

// Names the passes put into instrumented functions. The gpubpf prefix keeps
// them apart from compiler-generated names.
const (
	ctxVar = "__gpubpf_ctx" // .local copy of the kernel's parameters
	memVar = "__gpubpf_mem" // .local {u64 addr; u32 size; u32 kind}
	ctxReg = "%gpubpf_ctx"  // generic address of ctxVar
	memReg = "%gpubpf_mem"  // generic address of memVar

	memAddrReg   = "%gpubpf_maddr" // address of the access being recorded
	memMetaReg   = "%gpubpf_mmeta" // its size | kind<<32
	siteTimeReg  = "%gpubpf_now"   // %globaltimer read at a site (Probe.SiteTime)
	entryTimeReg = "%gpubpf_t0"    // %globaltimer read at the kernel's entry (Probe.EntryTime)
)

// The hidden launch parameters and the registers they are loaded into.
var (
	launchParams = [2]string{"__gpubpf_lw0", "__gpubpf_lw1"}
	launchRegs   = [2]string{"%gpubpf_lw0", "%gpubpf_lw1"}
)

func instr(pred, op string, operands ...string) *ptx.Stmt {
	return &ptx.Stmt{Kind: ptx.Instr, Pred: pred, Op: op, Operands: operands}
}

func decl(text string) *ptx.Stmt { return &ptx.Stmt{Kind: ptx.Decl, Text: text} }

// Statements every probe call shares. They are never modified after
// creation (the passes only rewrite instructions that reference module
// variables or that they created for one site), so one copy serves all
// sites; a large module has tens of thousands of them.
var (
	stOpen   = &ptx.Stmt{Kind: ptx.BlockOpen}
	stClose  = &ptx.Stmt{Kind: ptx.BlockClose}
	stArgDcl = decl(".param .b64 gpubpf_arg")
	stRetDcl = decl(".param .b64 gpubpf_ret")
)

// callProbe returns the statements that call probe with ctx (a register or
// "0"). The probe may be reached divergently, so plain call, not call.uni.
func (c *Clone) callProbe(probe, ctx string) []*ptx.Stmt {
	return c.appendCall(make([]*ptx.Stmt, 0, 6), probe, ctx)
}

// siteTime returns the clock read that goes before a site's guard when
// probe asks for the time it was reached (Probe.SiteTime), else out as is.
// Before the guard, every lane of a diverged warp reads it where it
// arrives: behind the guard's branch, the lanes that branch wait for the
// other path to run first.
func (c *Clone) siteTime(out []*ptx.Stmt, probe string) []*ptx.Stmt {
	if p := c.inline[probe]; p != nil && p.SiteTime {
		return append(out, c.ins("", "mov.u64", siteTimeReg, "%globaltimer"))
	}
	return out
}

// guard wraps stmts so they run only where pred ("@%p" or "@!%p") holds.
func (c *Clone) guard(pred string, stmts []*ptx.Stmt) []*ptx.Stmt {
	if pred == "" {
		return stmts
	}
	l := c.newLabel()
	// Plain bra: the predicate may differ between lanes (bra.uni would
	// promise it does not).
	out := []*ptx.Stmt{instr(negate(pred), "bra", l)}
	out = append(out, stmts...)
	return append(out, &ptx.Stmt{Kind: ptx.Label, Text: l})
}

func negate(pred string) string {
	if strings.HasPrefix(pred, "@!") {
		return "@" + pred[2:]
	}
	return "@!" + pred[1:]
}

// bodyStart is the index after the leading declarations of a body, where
// entry code goes (the .reg and .local declarations must stay first so the
// inserted code can follow nvcc's layout; PTX itself allows either).
func bodyStart(f *ptx.Func) int {
	for i, s := range f.Body {
		if s.Kind == ptx.Decl || s.Kind == ptx.Comment {
			continue
		}
		return i
	}
	return len(f.Body)
}

// prologue puts decls first in f's body and code where its own code
// begins, before everything the passes inserted there so far.
func prologue(f *ptx.Func, decls, code []*ptx.Stmt) {
	if len(decls) > 0 {
		f.Body = append(decls, f.Body...)
	}
	at := bodyStart(f)
	f.Body = append(f.Body[:at], append(code, f.Body[at:]...)...)
}

// ----- globals aliasing -----

// symRef parses "sym", "sym+8", "sym+-8", "sym-8" into the name and offset.
func symRef(s string) (name string, off int64, ok bool) {
	s = strings.TrimSpace(s)
	i := 0
	for i < len(s) && ptx.IsIdentChar(s[i]) {
		i++
	}
	if i == 0 || !ptx.IsIdentStart(s[0]) || s[0] == '%' {
		return "", 0, false
	}
	name, rest := s[:i], strings.ReplaceAll(s[i:], " ", "")
	// Fold a chain of constant terms: "+8", "+-4+8", "-4".
	for rest != "" {
		sign := int64(1)
		switch {
		case strings.HasPrefix(rest, "+-"):
			sign, rest = -1, rest[2:]
		case strings.HasPrefix(rest, "+"):
			rest = rest[1:]
		case strings.HasPrefix(rest, "-"):
			sign, rest = -1, rest[1:]
		default:
			return "", 0, false
		}
		j := 0
		for j < len(rest) && (rest[j] >= '0' && rest[j] <= '9' || rest[j] >= 'a' && rest[j] <= 'f' || rest[j] >= 'A' && rest[j] <= 'F' || rest[j] == 'x' || rest[j] == 'X') {
			j++
		}
		v, err := strconv.ParseInt(rest[:j], 0, 64)
		if err != nil {
			return "", 0, false
		}
		off += sign * v
		rest = rest[j:]
	}
	return name, off, true
}

func hex(v uint64) string { return "0x" + strconv.FormatUint(v, 16) }

// AliasGlobals rewrites every reference to a module variable of the .global
// or .const space so it uses the original module's address from addrs, and
// removes the clone's own definition: the clone then reads and writes the
// application's state (DESIGN.md, "Instrumented clones can share the
// application's globals"). With addrs == nil nothing is aliased (the clone
// keeps its own copies; useful only for offline checks). A referenced
// variable without an address is an error unless it has an initializer, in
// which case the clone keeps its own initialised copy and it is listed in
// Fresh.
func (c *Clone) AliasGlobals(addrs map[string]uint64) error {
	if addrs == nil {
		for _, v := range c.Vars {
			if v.Space == "global" || v.Space == "const" {
				c.Fresh = append(c.Fresh, v.Name)
			}
		}
		return nil
	}
	alias := map[string]*ptx.Var{}
	var missing []string
	for _, v := range c.Vars {
		if v.Space != "global" && v.Space != "const" {
			continue // .shared/.local stay per-launch; textures cannot alias
		}
		a, ok := addrs[v.Name]
		switch {
		case ok:
			alias[v.Name] = v
			c.Aliased[v.Name] = a
		case v.HasInit && !v.Extern:
			c.Fresh = append(c.Fresh, v.Name)
		default:
			missing = append(missing, v.Name)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return fmt.Errorf("kernels %s use module variables %s but no device address was given for them: the agent must look each up with cuModuleGetGlobal/cuLibraryGetGlobal in the original module (a fresh copy would silently diverge from the application's state)",
			strings.Join(c.KernelNames(), ", "), strings.Join(missing, ", "))
	}
	if len(alias) == 0 {
		return nil
	}
	// Drop the clone's definitions (and .extern declarations).
	items := c.M.Items[:0]
	for _, it := range c.M.Items {
		if v, ok := it.(*ptx.Var); ok && alias[v.Name] != nil {
			continue
		}
		items = append(items, it)
	}
	c.M.Items = items
	for _, f := range c.all() {
		c.aliasFunc(f, alias)
	}
	return nil
}

// constToGlobal turns a .const access into a .global one and remembers it
// was a constant-bank access in the application.
func (c *Clone) constToGlobal(s *ptx.Stmt) {
	if op := strings.Replace(s.Op, ".const", ".global", 1); op != s.Op {
		s.Op = op
		c.fromConst[s] = true
	}
}

// touches reports whether aliasing may change s: an operand names an
// aliased variable or a register holding an aliased address. Most
// statements do not, and are then neither copied nor rebuilt.
func touches(s *ptx.Stmt, alias map[string]*ptx.Var, tainted map[string]bool) bool {
	for _, o := range s.Operands {
		inner := o
		if strings.HasPrefix(o, "[") && strings.HasSuffix(o, "]") {
			inner = o[1 : len(o)-1]
		}
		if inner == "" {
			continue
		}
		if inner[0] == '%' {
			if len(tainted) > 0 {
				reg, _, _ := strings.Cut(inner, "+")
				if tainted[strings.TrimSpace(reg)] {
					return true
				}
			}
			continue
		}
		if name, _, ok := symRef(inner); ok && alias[name] != nil {
			return true
		}
	}
	return false
}

func (c *Clone) aliasFunc(f *ptx.Func, alias map[string]*ptx.Var) {
	tainted := map[string]bool{} // registers holding an aliased address
	var out []*ptx.Stmt          // nil until something is inserted
	for idx, s := range f.Body {
		if s.Kind != ptx.Instr || !touches(s, alias, tainted) {
			if out != nil {
				out = append(out, s)
			}
			if len(tainted) > 0 && s.Kind == ptx.Instr && len(s.Operands) >= 2 {
				delete(tainted, s.Operands[0]) // overwritten
			}
			continue
		}
		// Statements may be shared with the original module: copy first.
		t := *s
		t.Operands = append([]string(nil), s.Operands...)
		s = &t
		var pre []*ptx.Stmt
		base := s.Base()
		replaced := false
		for i, o := range s.Operands {
			if strings.HasPrefix(o, "[") && strings.HasSuffix(o, "]") {
				inner := o[1 : len(o)-1]
				if inner == "" {
					continue
				}
				if name, off, ok := symRef(inner); ok && alias[name] != nil {
					r := c.tmp(f, "rd")
					pre = append(pre, instr("", "mov.u64", r, hex(c.Aliased[name]+uint64(off))))
					s.Operands[i] = "[" + r + "]"
					c.constToGlobal(s)
					c.Sites.Globals++
				} else if inner[0] == '%' {
					reg, _, _ := strings.Cut(inner, "+")
					if tainted[strings.TrimSpace(reg)] {
						// A register holding an aliased .const address
						// now holds a global one.
						c.constToGlobal(s)
					}
				}
				continue
			}
			if i == 0 && base != "st" && base != "red" && base != "call" {
				continue // destination
			}
			if name, off, ok := symRef(o); ok && alias[name] != nil {
				s.Operands[i] = hex(c.Aliased[name] + uint64(off))
				c.Sites.Globals++
				replaced = true
				if base == "cvta" {
					// cvta.global/cvta.const of the symbol: the address
					// is already generic.
					s.Op = "mov.u64"
				}
			}
		}
		// Track registers derived from aliased addresses, and turn space
		// conversions of them into moves (the address is already generic).
		if len(s.Operands) >= 2 && !strings.HasPrefix(s.Operands[0], "[") {
			dst := s.Operands[0]
			src := replaced
			for _, o := range s.Operands[1:] {
				if tainted[o] {
					src = true
				}
			}
			switch base := s.Base(); {
			case base == "cvta" && src && !s.HasMod("to"):
				s.Op = "mov.b64"
				tainted[dst] = true
			case (base == "mov" || base == "add" || base == "sub" || base == "cvta") && src:
				tainted[dst] = true
			default:
				delete(tainted, dst)
			}
		}
		if len(pre) > 0 && out == nil {
			out = make([]*ptx.Stmt, 0, len(f.Body)+16)
			out = append(out, f.Body[:idx]...)
		}
		if out != nil {
			out = append(out, pre...)
			out = append(out, s)
		} else {
			f.Body[idx] = s
		}
	}
	if out != nil {
		f.Body = out
	}
}

// ----- stub redirection -----

// RedirectStubs replaces calls of __bpftime_cuda__kernel_trace and
// __gpubpf_hook_* by calls of the entry probe. Kernels that contain such a
// call (directly or in a function they call) are recorded so InsertEntry
// skips them: the program chose where its probe runs.
func (c *Clone) RedirectStubs(p *Probe) {
	if p == nil {
		return
	}
	direct := map[string]bool{} // functions that call a stub themselves
	for _, f := range c.all() {
		c.site, c.inEntry = c.kernelOf(f), f.Entry
		out := make([]*ptx.Stmt, 0, len(f.Body))
		for _, s := range f.Body {
			if s.Kind == ptx.Instr && s.Base() == "call" {
				if callee := callTarget(s); isStub(callee) {
					ctx := "0"
					var pre []*ptx.Stmt
					if p.UsesCtx && f.Entry {
						ctx = ctxReg
					} else if p.UsesCtx {
						ctx, pre = ctxReg, c.zeroCtxIn(f, p.CtxBytes)
						c.Notes = append(c.Notes, fmt.Sprintf("%s calls %s from a .func, where the kernel parameters are out of reach: the probe reads zeros for ctx there", f.Name, callee))
					}
					out = c.siteTime(out, p.Func)
					out = append(out, c.guard(s.Pred, append(pre, c.callProbe(p.Func, ctx)...))...)
					direct[f.Name] = true
					c.Sites.Stub++
					continue
				}
			}
			out = append(out, s)
		}
		f.Body = out
	}
	// A kernel is stubbed if it reaches a function that calls a stub.
	calls := map[string][]string{}
	for _, f := range c.all() {
		for _, s := range f.Body {
			if s.Kind == ptx.Instr && s.Base() == "call" {
				calls[f.Name] = append(calls[f.Name], callTarget(s))
			}
		}
	}
	for _, k := range c.Kernels {
		seen := map[string]bool{}
		var reach func(string) bool
		reach = func(n string) bool {
			if direct[n] {
				return true
			}
			if seen[n] {
				return false
			}
			seen[n] = true
			for _, g := range calls[n] {
				if reach(g) {
					return true
				}
			}
			return false
		}
		if reach(k.Name) {
			c.stubbed[k.Name] = true
		}
	}
}

// callTarget returns the callee of a call instruction ("" if indirect).
func callTarget(s *ptx.Stmt) string {
	for _, o := range s.Operands {
		if strings.HasPrefix(o, "(") || strings.HasPrefix(o, "%") {
			continue
		}
		return o
	}
	return ""
}

// ----- entry and exit -----

// needCtx reports whether any kernel-level probe reads ctx.
func (c *Clone) needCtx(ps ...*Probe) bool {
	for _, p := range ps {
		if p != nil && p.UsesCtx {
			return true
		}
	}
	return false
}

// ctxReach is the most bytes of ctx the probes that read it may access.
func ctxReach(ps ...*Probe) int {
	n := 0
	for _, p := range ps {
		if p != nil && p.UsesCtx {
			n = max(n, p.CtxBytes)
		}
	}
	return n
}

// zeroUnroll is the most 8-byte stores a zero fill is written out as; a
// longer one (up to jit.CtxMax bytes, for a probe whose ctx pointer the
// compiler could not follow) is a loop of 32-byte steps.
const zeroUnroll = 16

// zeroLocal returns code that zeroes bytes [from, to) of the .local array
// buf (from a multiple of 8), and the end it zeroes to: to rounded up to a
// whole store or loop step. buf must be declared at least that big.
func (c *Clone) zeroLocal(buf string, from, to int) ([]*ptx.Stmt, int) {
	to = (to + 7) / 8 * 8
	if (to-from)/8 <= zeroUnroll {
		var out []*ptx.Stmt
		for o := from; o < to; o += 8 {
			out = append(out, c.ins("", "st.local.b64", fmt.Sprintf("[%s+%d]", buf, o), "0"))
		}
		return out, to
	}
	to = from + (to-from+31)/32*32
	l := c.newLabel()
	text := fmt.Sprintf("\t{\n\t.reg .b64 %%gpubpf_z<2>;\n\t.reg .pred %%gpubpf_zp;\n"+
		"\tmov.u64 %%gpubpf_z0, %[1]s;\n\tadd.u64 %%gpubpf_z1, %%gpubpf_z0, %[2]d;\n\tadd.u64 %%gpubpf_z0, %%gpubpf_z0, %[3]d;\n"+
		"%[4]s:\n\tst.local.b64 [%%gpubpf_z0], 0;\n\tst.local.b64 [%%gpubpf_z0+8], 0;\n"+
		"\tst.local.b64 [%%gpubpf_z0+16], 0;\n\tst.local.b64 [%%gpubpf_z0+24], 0;\n"+
		"\tadd.u64 %%gpubpf_z0, %%gpubpf_z0, 32;\n\tsetp.lt.u64 %%gpubpf_zp, %%gpubpf_z0, %%gpubpf_z1;\n\t@%%gpubpf_zp bra %[4]s;\n\t}\n",
		buf, to, from, l)
	return []*ptx.Stmt{{Kind: ptx.Raw, Text: text}}, to
}

// zeroCtxIn returns the code that gives a probe called in .func f, where
// the kernel's parameters are out of reach, a ctx of zeros: a .local
// buffer of f (declared by finish) zero-filled and its generic address in
// %gpubpf_ctx. A NULL ctx instead would fault the context on the first
// read. The fill is redone at each call, so that a probe writing its ctx
// leaves no trace for the next; exits run once per thread.
func (c *Clone) zeroCtxIn(f *ptx.Func, reach int) []*ptx.Stmt {
	code, size := c.zeroLocal(ctxVar, 0, max(reach, 8))
	c.zeroCtx[f] = max(c.zeroCtx[f], size)
	return append(code,
		c.ins("", "mov.u64", ctxReg, ctxVar),
		c.ins("", "cvta.local.u64", ctxReg, ctxReg))
}

// buildCtx inserts, at the start of kernel k, the copy of its parameters
// into a .local buffer laid out like CUDA's kernelParams (each at its
// natural alignment, in order) and puts the buffer's generic address in
// %gpubpf_ctx. The buffer holds at least reach bytes: a probe may read
// further than the parameters go (up to jit.CtxMax), and finds zeros there.
func (c *Clone) buildCtx(k *ptx.Func, reach int) {
	var code []*ptx.Stmt
	off := 0
	for _, p := range k.Params {
		al := p.Alignment()
		size := p.Size()
		off = (off + al - 1) / al * al
		chunk := min(al, 8)
		if size%chunk != 0 || ptx.TypeSize(p.Type) == 0 {
			chunk = 1
		}
		for o := 0; o < size; o += chunk {
			var r, bits string
			switch chunk {
			case 8:
				r, bits = c.tmp(k, "rd"), "b64"
			case 4:
				r, bits = c.tmp(k, "r"), "b32"
			case 2:
				r, bits = c.tmp(k, "h"), "b16"
			default:
				r, bits = c.tmp(k, "h"), "b8"
			}
			code = append(code,
				instr("", "ld.param."+bits, r, fmt.Sprintf("[%s+%d]", p.Name, o)),
				instr("", "st.local."+bits, fmt.Sprintf("[%s+%d]", ctxVar, off+o), r))
		}
		off += size
	}
	size := max((off+7)/8*8, 8)
	if reach > off {
		// Zeros first: the first word may hold the last parameter's
		// bytes, which the copy then puts in.
		var zero []*ptx.Stmt
		zero, size = c.zeroLocal(ctxVar, off/8*8, max(reach, size))
		code = append(zero, code...)
	}
	code = append([]*ptx.Stmt{decl(fmt.Sprintf(".local .align 16 .b8 %s[%d]", ctxVar, size))}, code...)
	code = append(code,
		instr("", "mov.u64", ctxReg, ctxVar),
		instr("", "cvta.local.u64", ctxReg, ctxReg))
	prologue(k, nil, code)
}

// InsertEntry calls p at the start of every kernel without a redirected
// stub. With p nil it only builds the parameter copy the exit probe needs.
func (c *Clone) InsertEntry(p, exit *Probe) {
	for _, k := range c.Kernels {
		c.site, c.inEntry = k.Name, true
		wantEntry := p != nil && !c.stubbed[k.Name]
		// The parameter copy is built once at entry and reused by the exit
		// probe and redirected stubs.
		stubCtx := p != nil && p.UsesCtx && c.stubbed[k.Name]
		if (wantEntry && p.UsesCtx) || (exit != nil && exit.UsesCtx) || stubCtx {
			c.buildCtx(k, ctxReach(p, exit))
		}
		if !wantEntry {
			continue
		}
		ctx := "0"
		if p.UsesCtx {
			ctx = ctxReg
		}
		at := bodyStart(k)
		// bodyStart skips the declarations; after buildCtx the copy code is
		// there, so find the end of it: insert right after the cvta.
		for i := at; i < len(k.Body); i++ {
			if s := k.Body[i]; s.Kind == ptx.Instr && s.Op == "cvta.local.u64" && len(s.Operands) > 0 && s.Operands[0] == ctxReg {
				at = i + 1
				break
			}
		}
		k.Body = append(k.Body[:at], append(c.siteTime(nil, p.Func), append(c.callProbe(p.Func, ctx), k.Body[at:]...)...)...)
		c.Sites.Entry++
	}
}

// InsertExit calls p before every ret and exit of the kernels (keeping
// their predicates: "@%p ret" becomes "@!%p bra L; call; ret; L:") and
// before every exit in the functions they call (ret there returns to the
// kernel, which is not an exit).
func (c *Clone) InsertExit(p *Probe) {
	if p == nil {
		return
	}
	for _, f := range c.all() {
		if f.Entry {
			c.splitEarlyReturns(f)
		}
		c.site, c.inEntry = c.kernelOf(f), f.Entry
		out := make([]*ptx.Stmt, 0, len(f.Body)+8)
		for _, s := range f.Body {
			if s.Kind == ptx.Instr && (s.Base() == "exit" || f.Entry && s.Base() == "ret") {
				ctx := "0"
				var call []*ptx.Stmt
				if p.UsesCtx {
					if f.Entry {
						ctx = ctxReg
					} else {
						ctx, call = ctxReg, c.zeroCtxIn(f, p.CtxBytes)
						c.Notes = append(c.Notes, fmt.Sprintf("exit in .func %s: the exit probe reads zeros for ctx there", f.Name))
					}
				}
				call = append(call, c.callProbe(p.Func, ctx)...)
				out = c.siteTime(out, p.Func)
				if s.Pred == "" {
					out = append(out, call...)
					out = append(out, s)
				} else {
					// The label of the skipped path goes after the ret.
					q := *s
					q.Pred = ""
					out = append(out, c.guard(s.Pred, append(call, &q))...)
				}
				c.Sites.Exit++
				continue
			}
			out = append(out, s)
		}
		f.Body = out
	}
}

// AddLaunchWords appends the two hidden launch parameters to every kernel
// and loads them into registers first thing, when a probe reads them. They
// go last so the kernel's own parameters keep their offsets (the agent
// passes the application's parameters as they are, plus these two).
func (c *Clone) AddLaunchWords() {
	if !c.launchWords {
		return
	}
	c.launch = map[string]LaunchLayout{}
	for _, k := range c.Kernels {
		off := 0
		for _, p := range k.Params {
			al := p.Alignment()
			off = (off+al-1)/al*al + p.Size()
		}
		c.launch[k.Name] = LaunchLayout{Params: len(k.Params), BufOffset: (off + 7) / 8 * 8}
		params := append([]*ptx.Param(nil), k.Params...)
		var decls, loads []*ptx.Stmt
		for i, name := range launchParams {
			params = append(params, &ptx.Param{Text: ".param .u64 " + name, Name: name, Type: ".u64", Count: 1})
			decls = append(decls, decl(".reg .b64 "+launchRegs[i]))
			loads = append(loads, instr("", "ld.param.u64", launchRegs[i], "["+name+"]"))
		}
		k.Params = params
		prologue(k, decls, loads)
	}
}

// AddEntryTime makes every kernel read %globaltimer into entryTimeReg
// before anything else, when a probe asks for it: a probe at an exit then
// knows when its thread started without a store at entry and a load at
// exit through memory (threadhist's busy time).
func (c *Clone) AddEntryTime() {
	if !c.entryTime {
		return
	}
	for _, k := range c.Kernels {
		prologue(k, []*ptx.Stmt{decl(".reg .b64 " + entryTimeReg)}, []*ptx.Stmt{instr("", "mov.u64", entryTimeReg, "%globaltimer")})
	}
}

// splitEarlyReturns turns every branch to a bare "ret" into that ret,
// with the branch's predicate. nvcc compiles an early return ("if (lane
// != 31) return;") to a branch to the kernel's one final ret, and ptxas
// makes it a predicated EXIT: the lanes leave at once. A probe at the
// shared ret would hold them there until the other lanes arrive (the join
// is a convergence point), and a probe behind the branch runs whenever the
// warp gets to that path; as a predicated ret it is probed in line, before
// the lanes that stay go on.
func (c *Clone) splitEarlyReturns(f *ptx.Func) {
	rets := map[string]bool{} // labels of a bare ret
	for i, s := range f.Body {
		if s.Kind != ptx.Label {
			continue
		}
		for _, t := range f.Body[i+1:] {
			if t.Kind == ptx.Label {
				continue
			}
			if t.Kind == ptx.Instr && t.Pred == "" && t.Base() == "ret" {
				rets[s.Text] = true
			}
			break
		}
	}
	for i, s := range f.Body {
		if s.Kind == ptx.Instr && s.Base() == "bra" && len(s.Operands) == 1 && rets[s.Operands[0]] {
			// A new statement: the parsed module's statements are shared.
			f.Body[i] = instr(s.Pred, "ret")
		}
	}
}

// ----- memory accesses -----

// Kinds of access the memory probe reports (struct gpubpf_mem_access's
// kind in bpf/gpu.h). Store is 1 as the field's former is_store was, so a
// program that tests it for non-zero still sees stores as stores.
const (
	MemLoad   = 0
	MemStore  = 1
	MemAtomic = 2 // read-modify-write: atom and red alike
)

// memAccess reports whether s accesses global memory (global state space,
// or generic, which may be global) as the kernel's code sees it, and
// returns the index of its address operand, the access size in bytes and
// its kind.
//
// Reported: ld, ldu, st with every qualifier that keeps them plain
// accesses (.weak, .volatile, .relaxed/.acquire/.release with a scope,
// .mmio, .nc, cache operators, .L1::/.L2:: eviction, prefetch-size and
// .L2::cache_hint with its trailing cache-policy operand, .unified,
// vectors, .b128), and atom (address operand 1) and red (operand 0), also
// .cas/.exch (the size of one location, whatever the operand count) and
// the vector float forms (.v2/.v4/.v8: the whole vector).
//
// Not reported, on purpose: other state spaces (param, local, shared in
// any ::cta/::cluster form, const, tex); st.async/red.async/st.bulk (their
// target is shared::cluster/shared::cta); prefetch, prefetchu, applypriority,
// discard and createpolicy (no data moves into the program); cp.async and
// the bulk/TMA copies, multimem.*, and texture/surface instructions (data
// moves without passing a register of the thread at this instruction,
// or through handles that are not addresses).
func memAccess(s *ptx.Stmt) (addr int, size int, kind uint32, ok bool) {
	if s.Kind != ptx.Instr {
		return 0, 0, 0, false
	}
	switch b := s.Base(); b {
	case "ld", "ldu":
		addr, kind = 1, MemLoad
	case "st":
		addr, kind = 0, MemStore
	case "atom":
		addr, kind = 1, MemAtomic
	case "red":
		addr, kind = 0, MemAtomic
	default:
		return 0, 0, 0, false
	}
	parts := s.OpParts()[1:]
	vec, typ := 1, 0
	for _, p := range parts {
		// shared::cta, shared::cluster, param::entry, param::func: the
		// state space is the part before "::".
		space, _, _ := strings.Cut(p, "::")
		switch space {
		case "param", "local", "shared", "const", "tex", "async", "bulk":
			return 0, 0, 0, false
		case "v2":
			vec = 2
		case "v4":
			vec = 4
		case "v8":
			vec = 8
		}
		if n := ptx.TypeSize(p); n > 0 {
			typ = n
		}
	}
	if typ == 0 || len(s.Operands) < 2 {
		return 0, 0, 0, false
	}
	if addrInner(s.Operands[addr]) == "" {
		return 0, 0, 0, false
	}
	return addr, vec * typ, kind, true
}

// addrInner is what an address operand "[a]" (or "[a].unified") names,
// "" when the operand is no address.
func addrInner(o string) string {
	o = strings.TrimSuffix(o, ".unified")
	if len(o) < 3 || o[0] != '[' || o[len(o)-1] != ']' {
		return ""
	}
	return strings.TrimSpace(o[1 : len(o)-1])
}

// InsertMemAccess calls p after every global or generic load, store and
// atomic (see memAccess) with ctx pointing to {u64 addr; u32 size; u32
// kind}. The address is taken
// before the access (a load may overwrite its own address register) into
// one per-function register, which is free again once the record is
// written, so the pass adds three registers per function, not per site.
func (c *Clone) InsertMemAccess(p *Probe) {
	if p == nil {
		return
	}
	metas := map[uint64]string{}
	for _, f := range c.all() {
		c.site, c.inEntry = c.kernelOf(f), f.Entry
		var out []*ptx.Stmt
		n := 0
		for i, s := range f.Body {
			ai, size, kind, ok := memAccess(s)
			if !ok || c.fromConst[s] {
				if out != nil {
					out = append(out, s)
				}
				continue
			}
			if out == nil {
				out = make([]*ptx.Stmt, 0, len(f.Body)+16*(len(f.Body)-i))
				out = append(out, f.Body[:i]...)
			}
			out = c.appendAddr(out, addrInner(s.Operands[ai]))
			out = append(out, s)
			out = c.siteTime(out, p.Func)
			skip := ""
			if s.Pred != "" {
				// Plain bra: lanes may differ in the access's predicate,
				// which bra.uni would promise they do not.
				skip = c.newLabel()
				out = append(out, c.ins(negate(s.Pred), "bra", skip))
			}
			ctx := "0"
			if p.UsesCtx {
				meta := uint64(size) | uint64(kind)<<32
				lit := metas[meta]
				if lit == "" {
					lit = hex(meta)
					metas[meta] = lit
				}
				out = append(out,
					c.ins("", "st.local.b64", "["+memVar+"]", memAddrReg),
					c.ins("", "mov.b64", memMetaReg, lit),
					c.ins("", "st.local.b64", "["+memVar+"+8]", memMetaReg))
				ctx = memReg
			}
			out = c.appendCall(out, p.Func, ctx)
			if skip != "" {
				out = append(out, &ptx.Stmt{Kind: ptx.Label, Text: skip})
			}
			n++
		}
		if n == 0 {
			continue
		}
		head := []*ptx.Stmt{decl(".reg .b64 " + memAddrReg)}
		if p.UsesCtx {
			// The record's generic address is computed once per
			// function. A probe that reads past the 16-byte record
			// (up to jit.CtxMax) reads zeros, inside the buffer.
			var zero []*ptx.Stmt
			size := 16
			if p.CtxBytes > size {
				zero, size = c.zeroLocal(memVar, 16, p.CtxBytes)
			}
			head = append(head,
				decl(fmt.Sprintf(".local .align 8 .b8 %s[%d]", memVar, size)),
				decl(".reg .b64 "+memReg),
				decl(".reg .b64 "+memMetaReg))
			head = append(head, zero...)
			head = append(head,
				c.ins("", "mov.u64", memReg, memVar),
				c.ins("", "cvta.local.u64", memReg, memReg))
		}
		c.Sites.Mem += n
		f.Body = append(head, out...)
	}
}

// appendAddr appends the computation of the address "[inner]" names into
// memAddrReg. A symbol base (a module variable) is moved first: add takes
// no symbol operands; AliasGlobals later replaces its address with the
// original module's.
func (c *Clone) appendAddr(out []*ptx.Stmt, inner string) []*ptx.Stmt {
	inner = strings.ReplaceAll(inner, " ", "") // non-empty: see memAccess
	base, off := inner, ""
	if i := strings.IndexAny(inner[1:], "+-"); i >= 0 {
		base, off = inner[:i+1], inner[i+1:]
		off = strings.TrimPrefix(off, "+")
	}
	op := "mov.b64"
	if base[0] != '%' {
		op = "mov.u64"
	}
	out = append(out, c.ins("", op, memAddrReg, base))
	if off != "" && off != "0" {
		out = append(out, c.ins("", "add.s64", memAddrReg, memAddrReg, off))
	}
	return out
}

// kernelOf is the kernel a site in f runs in: f itself, the clone's only
// kernel, or "" for a device function several kernels may call.
func (c *Clone) kernelOf(f *ptx.Func) string {
	if f.Entry {
		return f.Name
	}
	if len(c.Kernels) == 1 {
		return c.Kernels[0].Name
	}
	return ""
}

// appendCall is callProbe appending to out.
func (c *Clone) appendCall(out []*ptx.Stmt, probe, ctx string) []*ptx.Stmt {
	if p := c.inline[probe]; p != nil {
		c.inlined++
		site := Site{Ctx: ctx, Uniq: fmt.Sprintf("gpubpf_i%d", c.inlined), Kernel: c.site}
		if p.SiteTime {
			site.Time = siteTimeReg
		}
		if c.launchWords && c.inEntry {
			site.Launch = launchRegs
		}
		if c.entryTime && c.inEntry {
			site.EntryTime = entryTimeReg
		}
		return append(out, &ptx.Stmt{Kind: ptx.Raw, Text: p.Inline(site)})
	}
	call := c.calls[probe]
	if call == nil {
		call = instr("", "call", "(gpubpf_ret)", probe, "(gpubpf_arg)")
		c.calls[probe] = call
	}
	return append(out, stOpen, stArgDcl, stRetDcl, c.ins("", "st.param.b64", "[gpubpf_arg]", ctx), call, stClose)
}

// ins makes an instruction from slabs: the memory pass makes hundreds of
// thousands of them for a large module.
func (c *Clone) ins(pred, op string, operands ...string) *ptx.Stmt {
	if len(c.slab) == 0 {
		c.slab = make([]ptx.Stmt, 4096)
	}
	if len(c.opSlab) < len(operands) {
		c.opSlab = make([]string, 16384)
	}
	st := &c.slab[0]
	c.slab = c.slab[1:]
	ops := c.opSlab[:len(operands):len(operands)]
	c.opSlab = c.opSlab[len(operands):]
	copy(ops, operands)
	*st = ptx.Stmt{Kind: ptx.Instr, Pred: pred, Op: op, Operands: ops}
	return st
}

// ----- probes, header, declarations -----

// AddProbes puts the probes' PTX in front of the first function, once each.
func (c *Clone) AddProbes(ps ...*Probe) error {
	seen := map[string]bool{}
	var items []ptx.Item
	for _, p := range ps {
		if p == nil || seen[p.Func] {
			continue
		}
		seen[p.Func] = true
		if !strings.Contains(p.PTX, p.Func) {
			return fmt.Errorf("probe %s: its PTX does not define %s", p.Func, p.Func)
		}
		items = append(items, &ptx.Directive{Text: p.PTX})
		c.probes = append(c.probes, p)
	}
	at := len(c.M.Items)
	for i, it := range c.M.Items {
		if _, ok := it.(*ptx.Func); ok {
			at = i
			break
		}
	}
	c.M.Items = append(c.M.Items[:at], append(items, c.M.Items[at:]...)...)
	return nil
}

// FixHeader raises .version to what the probes need, never above maxPTX
// (the highest ISA the driver accepts; zero means no limit), and fails if
// the module or a probe needs more than the driver accepts.
func (c *Clone) FixHeader(maxPTX [2]int) error {
	v := c.M.Version
	for _, p := range c.probes {
		if ptx.VersionLess(v, p.PTXVersion) {
			v = p.PTXVersion
		}
	}
	if maxPTX != [2]int{} && ptx.VersionLess(maxPTX, v) {
		return fmt.Errorf("the instrumented module needs PTX ISA %d.%d (module %d.%d, probes up to %d.%d) but the driver accepts at most %d.%d: update the driver or rebuild the application with an older toolkit",
			v[0], v[1], c.M.Version[0], c.M.Version[1], v[0], v[1], maxPTX[0], maxPTX[1])
	}
	c.M.Version = v
	return nil
}

// finish declares the scratch registers each function uses.
func (c *Clone) finish() {
	for _, f := range c.all() {
		var ds []*ptx.Stmt
		t := c.temps[f]
		if t != nil && t.rd > 0 {
			ds = append(ds, decl(fmt.Sprintf(".reg .b64 %%gpubpf_rd<%d>", t.rd+1)))
		}
		if t != nil && t.r > 0 {
			ds = append(ds, decl(fmt.Sprintf(".reg .b32 %%gpubpf_r<%d>", t.r+1)))
		}
		if t != nil && t.h > 0 {
			ds = append(ds, decl(fmt.Sprintf(".reg .b16 %%gpubpf_h<%d>", t.h+1)))
		}
		var ctx, now bool
		for _, s := range f.Body {
			if s.Kind == ptx.Instr && len(s.Operands) > 0 {
				ctx = ctx || s.Operands[0] == ctxReg
				now = now || s.Operands[0] == siteTimeReg
			}
		}
		if ctx {
			ds = append(ds, decl(".reg .b64 "+ctxReg))
		}
		if n := c.zeroCtx[f]; n > 0 {
			ds = append(ds, decl(fmt.Sprintf(".local .align 16 .b8 %s[%d]", ctxVar, n)))
		}
		if now {
			ds = append(ds, decl(".reg .b64 "+siteTimeReg))
		}
		f.Body = append(ds, f.Body...)
	}
}
