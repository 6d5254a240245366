// Package ptx is a PTX module model: enough structure to select kernels,
// follow what they reference and rewrite instructions, while printing
// everything it does not need to understand back as it was.
//
// The parser works on statements, not lines, so it accepts the layouts of
// nvcc 11.8-13.x, clang and Triton alike: statements end at ';', labels at
// ':', function bodies and nested scopes are '{' ... '}', and braces inside
// a statement (vector operands, initializers) stay part of it. Comments are
// kept as their own statements.
package ptx

import (
	"fmt"
	"strconv"
	"strings"
)

// Module is a parsed PTX module. Items keep the source order, which PTX
// requires (a function must be declared before it is called).
type Module struct {
	Version     [2]int // .version major, minor
	Target      []string
	AddressSize int
	Items       []Item
}

// Item is a top-level element: *Directive (.version, .target, comments,
// anything not modelled), *Var or *Func.
type Item interface{ item() }

// Directive is a top-level statement kept as text (its terminating ';', if
// any, included), or a comment, or an opaque block such as .section.
type Directive struct {
	Text string
	Line int
}

// Var is a module-scope variable (.global, .const, .shared, .local, also
// .extern declarations of them).
type Var struct {
	Text    string // the whole declaration without the trailing ';'
	Space   string // "global", "const", "shared", "local", "tex"...
	Name    string
	Extern  bool
	HasInit bool
	Line    int
}

// Param is a kernel or function parameter.
type Param struct {
	Text  string // as declared, e.g. ".param .u64 foo_param_0"
	Name  string
	Type  string // ".u64", ".b8", ...
	Align int    // explicit .align, 0 if none
	Count int    // array length, 1 for scalars
}

// Size returns the parameter's size in bytes.
func (p *Param) Size() int { return TypeSize(p.Type) * p.Count }

// Alignment returns the parameter's alignment (explicit or natural).
func (p *Param) Alignment() int {
	if p.Align > 0 {
		return p.Align
	}
	if s := TypeSize(p.Type); s > 0 {
		return s
	}
	return 1
}

// Func is a .entry or .func, defined (Body != nil) or only declared.
type Func struct {
	Entry    bool
	Linkage  string // ".visible", ".weak", ".extern" or ""
	Name     string
	Ret      []*Param // .func return parameters
	Params   []*Param
	Trailer  string  // performance directives after the parameter list (.maxntid ...)
	Body     []*Stmt // nil for a declaration
	Defined  bool
	Line     int
	noParens bool   // declared without a parameter list
	raw      string // unparsed body (ParseLazy) until Load
	rawLine  int
}

func (*Directive) item() {}
func (*Var) item()       {}
func (*Func) item()      {}

// StmtKind classifies a statement inside a function body.
type StmtKind int

// Statement kinds.
const (
	Instr      StmtKind = iota
	Label               // Text is the label name
	Decl                // .reg, .local, .shared, .param, .pragma, .loc...: Text as written
	Comment             // Text is the comment as written
	BlockOpen           // '{'
	BlockClose          // '}'
	Raw                 // Text is PTX emitted as is (a probe body pasted in by a pass)
)

// Stmt is one statement of a function body.
type Stmt struct {
	Kind StmtKind
	Text string // for Label, Decl, Comment
	// Instructions:
	Pred     string   // "@%p1", "@!%p1" or ""
	Op       string   // "ld.global.f32"
	Operands []string // top-level comma-separated operands, trimmed
	Line     int
}

// OpParts splits the opcode into its dot-separated parts ("ld", "global", "f32").
func (s *Stmt) OpParts() []string { return strings.Split(s.Op, ".") }

// Base is the opcode without modifiers ("ld").
func (s *Stmt) Base() string {
	if i := strings.IndexByte(s.Op, '.'); i >= 0 {
		return s.Op[:i]
	}
	return s.Op
}

// HasMod reports whether the opcode has modifier m (without the dot).
func (s *Stmt) HasMod(m string) bool {
	for _, p := range s.OpParts()[1:] {
		if p == m {
			return true
		}
	}
	return false
}

// String prints the statement as PTX (without indentation).
func (s *Stmt) String() string {
	var b strings.Builder
	s.writeTo(&b)
	return b.String()
}

func (s *Stmt) writeTo(b *strings.Builder) {
	switch s.Kind {
	case Label:
		b.WriteString(s.Text)
		b.WriteByte(':')
		return
	case Decl:
		b.WriteString(s.Text)
		if !lineDirective(s.Text) {
			b.WriteByte(';')
		}
		return
	case Comment, Raw:
		b.WriteString(s.Text)
		return
	case BlockOpen:
		b.WriteByte('{')
		return
	case BlockClose:
		b.WriteByte('}')
		return
	}
	if s.Pred != "" {
		b.WriteString(s.Pred)
		b.WriteByte(' ')
	}
	b.WriteString(s.Op)
	for i, o := range s.Operands {
		if i == 0 {
			b.WriteByte('\t')
		} else {
			b.WriteString(", ")
		}
		b.WriteString(o)
	}
	b.WriteByte(';')
}

// Funcs returns the module's functions with a body plus declarations, by name
// (the definition wins over a declaration).
func (m *Module) Funcs() map[string]*Func {
	out := map[string]*Func{}
	for _, it := range m.Items {
		if f, ok := it.(*Func); ok {
			if old := out[f.Name]; old == nil || f.Defined {
				out[f.Name] = f
			}
		}
	}
	return out
}

// Entries returns the kernels (.entry with a body) in source order.
func (m *Module) Entries() []*Func {
	var out []*Func
	for _, it := range m.Items {
		if f, ok := it.(*Func); ok && f.Entry && f.Defined {
			out = append(out, f)
		}
	}
	return out
}

// Vars returns the module-scope variables by name (a definition wins over
// an .extern declaration).
func (m *Module) Vars() map[string]*Var {
	out := map[string]*Var{}
	for _, it := range m.Items {
		if v, ok := it.(*Var); ok {
			if old := out[v.Name]; old == nil || !v.Extern {
				out[v.Name] = v
			}
		}
	}
	return out
}

// TypeSize is the size in bytes of a PTX fundamental type (".u32" -> 4), 0 if unknown.
func TypeSize(t string) int {
	t = strings.TrimPrefix(t, ".")
	switch t {
	case "pred":
		return 1
	case "b8", "s8", "u8", "e4m3", "e5m2":
		return 1
	case "b16", "s16", "u16", "f16", "bf16":
		return 2
	case "b32", "s32", "u32", "f32", "f16x2", "bf16x2", "tf32":
		return 4
	case "b64", "s64", "u64", "f64":
		return 8
	case "b128":
		return 16
	}
	return 0
}

// IsIdentStart / IsIdentChar follow PTX's identifier rules
// ([a-zA-Z_$%] then [a-zA-Z0-9_$]).
func IsIdentStart(c byte) bool {
	return c == '_' || c == '$' || c == '%' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// IsIdentChar reports whether c may continue an identifier.
func IsIdentChar(c byte) bool {
	return c == '_' || c == '$' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// Idents calls fn for every identifier in s that is not a register
// (%...), a directive (.xyz) or part of a number, with its byte offset.
func Idents(s string, fn func(name string, at int)) {
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '"':
			j := strings.IndexByte(s[i+1:], '"')
			if j < 0 {
				return
			}
			i += j + 2
		case c == '%' || c == '.':
			i++
			for i < len(s) && IsIdentChar(s[i]) {
				i++
			}
		case c >= '0' && c <= '9':
			for i < len(s) && (IsIdentChar(s[i]) || s[i] == '.') {
				i++
			}
		case IsIdentStart(c):
			j := i + 1
			for j < len(s) && IsIdentChar(s[j]) {
				j++
			}
			fn(s[i:j], i)
			i = j
		default:
			i++
		}
	}
}

// ParseVersion parses "7.8" into {7, 8}.
func ParseVersion(s string) ([2]int, error) {
	a, b, ok := strings.Cut(strings.TrimSpace(s), ".")
	x, err1 := strconv.Atoi(a)
	y, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil {
		return [2]int{}, fmt.Errorf("bad PTX version %q", s)
	}
	return [2]int{x, y}, nil
}

// VersionLess reports a < b.
func VersionLess(a, b [2]int) bool { return a[0] < b[0] || a[0] == b[0] && a[1] < b[1] }

// IsHeader reports whether the directive is .version, .target or
// .address_size (printed from the Module's fields).
func (d *Directive) IsHeader() bool { return strings.HasPrefix(d.Text, "\x00") }
