package ptx

import (
	"fmt"
	"strings"
)

// String prints the module as PTX.
func (m *Module) String() string {
	var b strings.Builder
	n := 0
	for _, it := range m.Items {
		if f, ok := it.(*Func); ok {
			n += 64 + 40*len(f.Body)
		}
	}
	b.Grow(n + 1<<12)
	for _, it := range m.Items {
		writeItem(&b, m, it)
	}
	return b.String()
}

func writeItem(b *strings.Builder, m *Module, it Item) {
	switch it := it.(type) {
	case *Directive:
		switch it.Text {
		case keyVersion:
			fmt.Fprintf(b, ".version %d.%d\n", m.Version[0], m.Version[1])
		case keyTarget:
			fmt.Fprintf(b, ".target %s\n", strings.Join(m.Target, ", "))
		case keyAddr:
			fmt.Fprintf(b, ".address_size %d\n", m.AddressSize)
		default:
			b.WriteString(it.Text)
			b.WriteByte('\n')
		}
	case *Var:
		b.WriteString(it.Text)
		b.WriteString(";\n")
	case *Func:
		it.write(b)
	}
}

// Header returns the function's header text (up to, not including, '{' or ';').
func (f *Func) Header() string {
	var b strings.Builder
	if f.Linkage != "" {
		b.WriteString(f.Linkage)
		b.WriteByte(' ')
	}
	if f.Entry {
		b.WriteString(".entry ")
	} else {
		b.WriteString(".func ")
		if f.Ret != nil {
			b.WriteByte('(')
			for i, p := range f.Ret {
				if i > 0 {
					b.WriteString(", ")
				}
				b.WriteString(p.Text)
			}
			b.WriteString(") ")
		}
	}
	b.WriteString(f.Name)
	if !f.noParens || len(f.Params) > 0 {
		b.WriteString("(")
		for i, p := range f.Params {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString("\n\t")
			b.WriteString(p.Text)
		}
		if len(f.Params) > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(")")
	}
	if f.Trailer != "" {
		b.WriteByte('\n')
		b.WriteString(f.Trailer)
	}
	return b.String()
}

func (f *Func) write(b *strings.Builder) {
	b.WriteString(f.Header())
	if !f.Defined {
		b.WriteString(";\n")
		return
	}
	if f.Body == nil && f.raw != "" {
		b.WriteString("\n{")
		b.WriteString(f.raw)
		b.WriteString("}\n")
		return
	}
	b.WriteString("\n{\n")
	WriteBody(b, f.Body)
	b.WriteString("}\n")
}

// WriteBody prints statements with nvcc-like indentation.
func WriteBody(b *strings.Builder, body []*Stmt) {
	depth := 1
	for _, s := range body {
		if s.Kind == BlockClose {
			depth--
		}
		if s.Kind != Label {
			for i := 0; i < depth; i++ {
				b.WriteByte('\t')
			}
		}
		s.writeTo(b)
		b.WriteByte('\n')
		if s.Kind == BlockOpen {
			depth++
		}
	}
}
