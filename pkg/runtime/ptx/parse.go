package ptx

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// MaxSize caps the PTX text Parse accepts (the largest real modules,
// PyTorch's, are a few hundred MB uncompressed; this is generous).
var MaxSize = 1 << 30

// SyntaxError reports where parsing failed.
type SyntaxError struct {
	Line int
	Msg  string
}

func (e *SyntaxError) Error() string { return fmt.Sprintf("PTX line %d: %s", e.Line, e.Msg) }

type tokKind int

const (
	tStmt    tokKind = iota // text ended by ';'
	tLabel                  // text ended by ':'
	tOpen                   // bare '{'
	tClose                  // '}'
	tComment                // comment
	tHeader                 // function header ended by '{'
	tRaw                    // opaque block (.section ... { ... })
	tBody                   // unparsed function body (lazy mode), without its braces
)

type token struct {
	kind tokKind
	text string
	line int
}

// lex splits PTX into statements. It never fails on content it does not
// understand; it fails only on unbalanced structure. Statement texts are
// substrings of src (no copies) unless a comment sits inside a statement.
func lex(src string) ([]token, error) { return lexMode(src, false, 1) }

// lexMode is lex; with lazy set, function bodies are not tokenized but
// skipped with a fast brace scan and returned whole as one tBody token.
// firstLine numbers the lines of src.
func lexMode(src string, lazy bool, firstLine int) ([]token, error) {
	toks := make([]token, 0, len(src)/24)
	line, curLine := firstLine, firstLine
	depth := 0 // braces opened inside the current statement
	n := len(src)
	start := 0 // first byte of the current statement (leading blanks skipped)
	// pre: the text of the statement before the comments inside it, if
	// any (trimmed, one blank where each comment was); appended to, so a
	// statement of many comments costs its length once
	var pre []byte
	hasText := false
	cur := func(i int) string {
		if len(pre) > 0 {
			return string(pre) + src[start:i]
		}
		return src[start:i]
	}
	trimmed := func(i int) string {
		if !hasText && len(pre) == 0 {
			return ""
		}
		return strings.TrimSpace(cur(i))
	}
	// lead is the start of the statement, for prefix tests that must not
	// cost O(statement) per character.
	lead := func(i int) string {
		if len(pre) > 0 {
			return string(pre[:min(len(pre), 32)])
		}
		return src[start:min(i, start+32)]
	}
	emit := func(k tokKind, text string, next int) {
		toks = append(toks, token{k, text, curLine})
		start, pre, hasText = next, pre[:0], false
	}
	// dropComment drops a comment inside a statement, from i to next.
	dropComment := func(i, next int) {
		pre = append(bytes.TrimRight(append(pre, src[start:i]...), " \t\r\n"), ' ')
		start = next
	}
	for i := 0; i < n; i++ {
		c := src[i]
		if !hasText && len(pre) == 0 {
			curLine = line
			if c == ' ' || c == '\t' || c == '\r' || c == '\n' {
				start = i + 1
			} else {
				start = i
				hasText = true
			}
		}
		switch {
		case c == '\n':
			// Header and debug directives end at the end of their line.
			if depth == 0 && hasText && lineDirective(lead(i)) {
				emit(tStmt, trimmed(i), i+1)
			}
			line++
		case c == '/' && i+1 < n && src[i+1] == '/':
			j := strings.IndexByte(src[i:], '\n')
			if j < 0 {
				j = n - i
			}
			if len(pre) == 0 && start == i { // nothing of a statement before it
				curLine = line
				emit(tComment, src[i:i+j], i+j)
			} else {
				dropComment(i, i+j) // a comment inside a statement is dropped
			}
			i += j - 1
		case c == '/' && i+1 < n && src[i+1] == '*':
			j := strings.Index(src[i+2:], "*/")
			if j < 0 {
				return nil, &SyntaxError{line, "unterminated /* comment"}
			}
			text := src[i : i+2+j+2]
			if len(pre) == 0 && start == i { // nothing of a statement before it
				curLine = line
				emit(tComment, text, i+len(text))
			} else {
				dropComment(i, i+len(text))
			}
			line += strings.Count(text, "\n")
			i += len(text) - 1
		case c == '"':
			j := strings.IndexByte(src[i+1:], '"')
			if j < 0 {
				return nil, &SyntaxError{line, "unterminated string"}
			}
			if strings.IndexByte(src[i:i+j+2], '\n') >= 0 {
				return nil, &SyntaxError{line, "newline in string"}
			}
			i += j + 1
		case c == ';' && depth == 0:
			emit(tStmt, trimmed(i), i+1)
		case c == ':' && depth == 0 && i-start < 1024 && len(pre) < 1024 && isIdent(trimmed(i)):
			emit(tLabel, trimmed(i), i+1)
		case c == '{' && depth > 0:
			depth++
		case c == '{':
			t := trimmed(i)
			switch {
			case t != "" && !isFuncHeader(t) && !strings.HasPrefix(t, ".section"):
				depth++
			case t == "":
				curLine = line
				emit(tOpen, "", i+1)
			case isFuncHeader(t):
				emit(tHeader, t, i+1)
				if lazy {
					end, nl, err := matchBrace(src, i)
					if err != nil {
						return nil, &SyntaxError{line, fmt.Sprintf("function body has no closing '}' (%v)", err)}
					}
					toks = append(toks, token{tBody, src[i+1 : end], line})
					line += nl
					start, i = end+1, end
				}
			default: // .section NAME { opaque bytes }
				end, nl, err := matchBrace(src, i)
				if err != nil {
					return nil, &SyntaxError{line, "unterminated " + t + " block"}
				}
				line += nl
				emit(tRaw, trimmed(end+1), end+1)
				i = end
			}
		case c == '}':
			if depth > 0 {
				depth--
				continue
			}
			if t := trimmed(i); t != "" {
				return nil, &SyntaxError{curLine, fmt.Sprintf("missing ';' after %q", short(t))}
			}
			curLine = line
			emit(tClose, "", i+1)
		}
	}
	if t := trimmed(n); t != "" && lineDirective(t) {
		emit(tStmt, t, n)
	}
	if t := trimmed(n); t != "" {
		return nil, &SyntaxError{curLine, fmt.Sprintf("unterminated statement %q at end of input", short(t))}
	}
	return toks, nil
}

// lineDirective reports directives that are not ';'-terminated.
func lineDirective(t string) bool {
	if t == "" || t[0] != '.' {
		return false
	}
	for _, d := range lineDirectives {
		if strings.HasPrefix(t, d) && (len(t) == len(d) || t[len(d)] == ' ' || t[len(d)] == '\t') {
			return true
		}
	}
	return false
}

var lineDirectives = []string{".version", ".target", ".address_size", ".file", ".loc"}

func short(s string) string {
	if len(s) > 60 {
		return s[:60] + "..."
	}
	return s
}

func matchBrace(src string, i int) (end, newlines int, err error) {
	d := 0
	for j := i; j < len(src); j++ {
		// Jump to the next byte that matters.
		k := strings.IndexAny(src[j:], "{}\n\"/")
		if k < 0 {
			break
		}
		j += k
		switch src[j] {
		case '/':
			if j+1 < len(src) && src[j+1] == '/' {
				e := strings.IndexByte(src[j:], '\n')
				if e < 0 {
					return 0, 0, fmt.Errorf("unbalanced")
				}
				j += e - 1
			} else if j+1 < len(src) && src[j+1] == '*' {
				e := strings.Index(src[j+2:], "*/")
				if e < 0 {
					return 0, 0, fmt.Errorf("unterminated /* comment")
				}
				newlines += strings.Count(src[j:j+2+e], "\n")
				j += e + 3
			}
		case '{':
			d++
		case '}':
			d--
			if d == 0 {
				return j, newlines, nil
			}
		case '\n':
			newlines++
		case '"':
			k := strings.IndexByte(src[j+1:], '"')
			if k < 0 {
				return 0, 0, fmt.Errorf("unterminated string")
			}
			j += k + 1
		}
	}
	return 0, 0, fmt.Errorf("unbalanced")
}

func isIdent(s string) bool {
	if s == "" || !IsIdentStart(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if !IsIdentChar(s[i]) {
			return false
		}
	}
	return true
}

func hasWord(s, w string) bool {
	for i := 0; ; {
		j := strings.Index(s[i:], w)
		if j < 0 {
			return false
		}
		j += i
		end := j + len(w)
		if (j == 0 || !IsIdentChar(s[j-1]) && s[j-1] != '.') && (end == len(s) || !IsIdentChar(s[end])) {
			return true
		}
		i = end
	}
}

func isFuncHeader(t string) bool { return hasWord(t, ".entry") || hasWord(t, ".func") }

// Parse parses PTX text.
func Parse(src string) (*Module, error) { return parse(src, false) }

// ParseLazy parses the module structure (header, variables, function
// signatures) but leaves function bodies as text until Func.Load is called:
// selecting a few kernels of a large module then costs little more than a
// scan of it. Syntax errors inside a body surface from Load.
func ParseLazy(src string) (*Module, error) { return parse(src, true) }

// Load parses the body of a function from ParseLazy (a no-op otherwise).
func (f *Func) Load() error {
	if f.Body != nil || !f.Defined {
		return nil
	}
	toks, err := lexMode(f.raw, false, f.rawLine)
	if err != nil {
		return err
	}
	toks = append(toks, token{kind: tClose, line: f.rawLine})
	body, _, err := parseBody(f, toks, 0)
	if err != nil {
		return err
	}
	f.Body, f.raw = body, ""
	return nil
}

func parse(src string, lazy bool) (*Module, error) {
	if len(src) > MaxSize {
		return nil, fmt.Errorf("PTX of %d bytes exceeds the %d-byte limit", len(src), MaxSize)
	}
	toks, err := lexMode(src, lazy, 1)
	if err != nil {
		return nil, err
	}
	m := &Module{}
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		switch t.kind {
		case tComment, tRaw:
			m.Items = append(m.Items, &Directive{Text: t.text, Line: t.line})
		case tLabel, tOpen:
			return nil, &SyntaxError{t.line, fmt.Sprintf("unexpected %s at module scope", describe(t))}
		case tClose:
			return nil, &SyntaxError{t.line, "unbalanced '}' at module scope"}
		case tHeader:
			f, err := parseFuncHeader(t.text, t.line)
			if err != nil {
				return nil, err
			}
			f.Defined = true
			if i+1 < len(toks) && toks[i+1].kind == tBody {
				f.raw, f.rawLine = toks[i+1].text, toks[i+1].line
				i++
			} else {
				body, next, err := parseBody(f, toks, i+1)
				if err != nil {
					return nil, err
				}
				f.Body, i = body, next
			}
			m.Items = append(m.Items, f)
		case tStmt:
			it, err := parseTopStmt(m, t.text, t.line)
			if err != nil {
				return nil, err
			}
			m.Items = append(m.Items, it)
		}
	}
	return m, nil
}

// parseBody parses the statements of f's body from toks[i:] up to the
// closing '}', returning them and the index of that '}'.
func parseBody(f *Func, toks []token, i int) ([]*Stmt, int, error) {
	// Find the body's end first so its statements can be allocated in one
	// block (a 5 MB module has ~200k of them).
	end, depth := i, 0
	for ; end < len(toks); end++ {
		if k := toks[end].kind; k == tClose && depth == 0 {
			break
		} else if k == tOpen {
			depth++
		} else if k == tClose {
			depth--
		}
	}
	if end == len(toks) {
		return nil, 0, &SyntaxError{f.Line, fmt.Sprintf("body of %s has no closing '}'", f.Name)}
	}
	slab := make([]Stmt, end-i)
	body := make([]*Stmt, end-i)
	for j := i; j < end; j++ {
		st := &slab[j-i]
		if err := parseBodyTok(toks[j], st); err != nil {
			return nil, 0, err
		}
		body[j-i] = st
	}
	return body, end, nil
}

func describe(t token) string {
	switch t.kind {
	case tLabel:
		return "label " + t.text
	case tOpen:
		return "'{'"
	}
	return "token"
}

// Directive keys regenerated from Module fields when printing.
const (
	keyVersion = "\x00version"
	keyTarget  = "\x00target"
	keyAddr    = "\x00address_size"
)

func parseTopStmt(m *Module, text string, line int) (Item, error) {
	fields := strings.Fields(text)
	if len(fields) == 0 {
		return &Directive{Text: ";", Line: line}, nil
	}
	switch fields[0] {
	case ".version":
		if len(fields) != 2 {
			return nil, &SyntaxError{line, "malformed .version"}
		}
		v, err := ParseVersion(fields[1])
		if err != nil {
			return nil, &SyntaxError{line, err.Error()}
		}
		m.Version = v
		return &Directive{Text: keyVersion, Line: line}, nil
	case ".target":
		for _, t := range strings.Split(strings.TrimSpace(strings.TrimPrefix(text, ".target")), ",") {
			if t = strings.TrimSpace(t); t != "" {
				m.Target = append(m.Target, t)
			}
		}
		if len(m.Target) == 0 {
			return nil, &SyntaxError{line, ".target without a target"}
		}
		return &Directive{Text: keyTarget, Line: line}, nil
	case ".address_size":
		n, err := strconv.Atoi(strings.Join(fields[1:], ""))
		if err != nil || n != 32 && n != 64 {
			return nil, &SyntaxError{line, "malformed .address_size"}
		}
		m.AddressSize = n
		return &Directive{Text: keyAddr, Line: line}, nil
	}
	if isFuncHeader(text) {
		return parseFuncHeader(text, line)
	}
	if v := parseVar(text, line); v != nil {
		return v, nil
	}
	if lineDirective(text) {
		return &Directive{Text: text, Line: line}, nil
	}
	return &Directive{Text: text + ";", Line: line}, nil
}

var spaces = map[string]string{
	".global": "global", ".const": "const", ".shared": "shared", ".local": "local",
	".tex": "tex", ".texref": "texref", ".surfref": "surfref", ".samplerref": "samplerref",
}

func parseVar(text string, line int) *Var {
	decl, _, hasInit := strings.Cut(text, "=")
	fields := strings.Fields(decl)
	v := &Var{Text: text, HasInit: hasInit, Line: line}
	for i := 0; i < len(fields); i++ {
		f := fields[i]
		if s, ok := spaces[f]; ok && v.Space == "" {
			v.Space = s
			continue
		}
		if f == ".extern" {
			v.Extern = true
		}
		if f == ".align" {
			i++
			continue
		}
		if strings.HasPrefix(f, ".") {
			continue
		}
		j := 0
		for j < len(f) && IsIdentChar(f[j]) {
			j++
		}
		if j > 0 && IsIdentStart(f[0]) {
			v.Name = f[:j]
			break
		}
	}
	if v.Space == "" || v.Name == "" {
		return nil
	}
	return v
}

// parseFuncHeader parses "[linkage] .entry NAME(params) [trailer]" and
// "[linkage] .func [(ret)] NAME[(params)] [trailer]".
func parseFuncHeader(text string, line int) (*Func, error) {
	f := &Func{Line: line}
	s := text
	kw := ".func"
	if hasWord(s, ".entry") {
		kw, f.Entry = ".entry", true
	}
	i := strings.Index(s, kw)
	for hasWordAt(s, kw, i) == false {
		j := strings.Index(s[i+1:], kw)
		if j < 0 {
			return nil, &SyntaxError{line, "malformed function header"}
		}
		i += j + 1
	}
	f.Linkage = strings.Join(strings.Fields(s[:i]), " ")
	for _, l := range strings.Fields(s[:i]) {
		if l != ".visible" && l != ".weak" && l != ".extern" && l != ".common" {
			return nil, &SyntaxError{line, fmt.Sprintf("unexpected %q before %s", l, kw)}
		}
	}
	s = strings.TrimSpace(s[i+len(kw):])
	if !f.Entry && strings.HasPrefix(s, "(") {
		inner, rest, err := parenGroup(s)
		if err != nil {
			return nil, &SyntaxError{line, "return parameters: " + err.Error()}
		}
		if f.Ret, err = parseParams(inner, line); err != nil {
			return nil, err
		}
		s = strings.TrimSpace(rest)
	}
	j := 0
	for j < len(s) && IsIdentChar(s[j]) {
		j++
	}
	if j == 0 || !IsIdentStart(s[0]) {
		return nil, &SyntaxError{line, fmt.Sprintf("function header %q has no name", short(text))}
	}
	f.Name = s[:j]
	s = strings.TrimSpace(s[j:])
	if strings.HasPrefix(s, "(") {
		inner, rest, err := parenGroup(s)
		if err != nil {
			return nil, &SyntaxError{line, fmt.Sprintf("parameters of %s: %v", f.Name, err)}
		}
		if f.Params, err = parseParams(inner, line); err != nil {
			return nil, err
		}
		s = strings.TrimSpace(rest)
	} else {
		f.noParens = true
	}
	// The trailer is printed on a line of its own: a function keyword in
	// it (".func f.entry{}") would start another function when the
	// module is read back.
	if hasWord(s, ".entry") || hasWord(s, ".func") {
		return nil, &SyntaxError{line, fmt.Sprintf("function header %q: unexpected %q after the name", short(text), s)}
	}
	f.Trailer = s
	return f, nil
}

func hasWordAt(s, w string, i int) bool {
	if i < 0 || i+len(w) > len(s) || s[i:i+len(w)] != w {
		return false
	}
	end := i + len(w)
	return (i == 0 || !IsIdentChar(s[i-1]) && s[i-1] != '.') && (end == len(s) || !IsIdentChar(s[end]))
}

// parenGroup splits "(a, (b)) rest" into "a, (b)" and " rest".
func parenGroup(s string) (inner, rest string, err error) {
	d := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '(':
			d++
		case ')':
			d--
			if d == 0 {
				return s[1:i], s[i+1:], nil
			}
		}
	}
	return "", "", fmt.Errorf("unbalanced parentheses")
}

func parseParams(s string, line int) ([]*Param, error) {
	var out []*Param
	for _, p := range SplitOperands(s) {
		if p == "" {
			continue
		}
		q, err := parseParam(p)
		if err != nil {
			return nil, &SyntaxError{line, err.Error()}
		}
		out = append(out, q)
	}
	return out, nil
}

func parseParam(text string) (*Param, error) {
	p := &Param{Text: text, Count: 1}
	fields := strings.Fields(text)
	for i := 0; i < len(fields); i++ {
		f := fields[i]
		switch {
		case f == ".align":
			if i+1 >= len(fields) {
				return nil, fmt.Errorf("parameter %q: .align without a value", text)
			}
			n, err := strconv.Atoi(fields[i+1])
			if err != nil || n <= 0 || n > 1<<16 {
				return nil, fmt.Errorf("parameter %q: bad .align", text)
			}
			p.Align = n
			i++
		case TypeSize(f) > 0 && strings.HasPrefix(f, "."):
			p.Type = f
		case !strings.HasPrefix(f, "."):
			name := f
			if k := strings.IndexByte(name, '['); k >= 0 {
				dim := strings.TrimSuffix(name[k+1:], "]")
				name = name[:k]
				if dim != "" {
					n, err := strconv.Atoi(dim)
					if err != nil || n < 0 || n > 1<<20 {
						return nil, fmt.Errorf("parameter %q: bad array size", text)
					}
					p.Count = n
				}
			}
			p.Name = name
		}
	}
	if p.Name == "" {
		return nil, fmt.Errorf("parameter %q has no name", text)
	}
	return p, nil
}

// SplitOperands splits on commas outside (), [] and {}.
func SplitOperands(s string) []string {
	var out []string
	d, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '(', '[', '{':
			d++
		case ')', ']', '}':
			d--
		case ',':
			if d == 0 {
				out = append(out, strings.TrimSpace(s[start:i]))
				start = i + 1
			}
		}
	}
	if t := strings.TrimSpace(s[start:]); t != "" || len(out) > 0 {
		out = append(out, t)
	}
	return out
}

func parseBodyTok(t token, st *Stmt) error {
	switch t.kind {
	case tComment:
		*st = Stmt{Kind: Comment, Text: t.text, Line: t.line}
	case tLabel:
		*st = Stmt{Kind: Label, Text: t.text, Line: t.line}
	case tOpen:
		*st = Stmt{Kind: BlockOpen, Line: t.line}
	case tClose:
		*st = Stmt{Kind: BlockClose, Line: t.line}
	case tHeader, tRaw:
		return &SyntaxError{t.line, fmt.Sprintf("%q inside a function body", short(t.text))}
	default:
		return parseInstrInto(t.text, t.line, st)
	}
	return nil
}

// ParseInstr parses one body statement (without its ';').
func ParseInstr(text string, line int) (*Stmt, error) {
	st := &Stmt{}
	if err := parseInstrInto(text, line, st); err != nil {
		return nil, err
	}
	return st, nil
}

func parseInstrInto(text string, line int, st *Stmt) error {
	text = strings.TrimSpace(text)
	if text == "" || text[0] == '.' {
		*st = Stmt{Kind: Decl, Text: text, Line: line}
		return nil
	}
	*st = Stmt{Kind: Instr, Line: line}
	if text[0] == '@' {
		k := strings.IndexAny(text, " \t\n")
		if k < 0 {
			return &SyntaxError{line, fmt.Sprintf("predicate %q without an instruction", short(text))}
		}
		st.Pred = text[:k]
		text = strings.TrimSpace(text[k:])
	}
	k := strings.IndexAny(text, " \t\r\n")
	if k < 0 {
		st.Op = text
	} else {
		st.Op = text[:k]
		st.Operands = SplitOperands(text[k:])
		for i, o := range st.Operands {
			// Operands are substrings of the source; only those spread over
			// several lines or with tabs inside get rebuilt.
			if strings.ContainsAny(o, "\t\r\n") {
				st.Operands[i] = strings.Join(strings.Fields(o), " ")
			}
		}
	}
	if st.Op == "" || !IsIdentStart(st.Op[0]) {
		return &SyntaxError{line, fmt.Sprintf("bad instruction %q", short(text))}
	}
	return nil
}
