package toolkit

import (
	"bytes"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/cpuguy83/go-md2man/v2/md2man"
	"github.com/urfave/cli/v2"
)

// Help is bcc-sized: -h is what the tool does in a sentence, its usage,
// EXAMPLES and its everyday flags, within helpLines lines of helpWidth
// columns; every flag with its whole description, the JSON fields and the
// account are in the man page (Manual), made from the same definitions.
const (
	helpWidth = 100
	helpLines = 40
)

// moreFlags are the flags -h names on one line instead of describing:
// what a first run does not need (the man page has them all).
var moreFlags = map[string]bool{
	FlagAll: true, FlagDevice: true, FlagNoInject: true, FlagPerDevice: true, FlagTimestamp: true,
	FlagPrometheus: true, FlagOTLP: true, FlagMaxSeries: true, FlagRingMB: true, FlagNoDrop: true,
	FlagNoDropWait: true, "help": true, "version": true,
}

const appHelpTemplate = `{{.Name}} - {{.Usage}}

USAGE: {{usageLine .}}
{{with examples .}}
EXAMPLES:
{{.}}{{end}}
FLAGS:
{{flagLines .VisibleFlags}}{{moreLine .Name .VisibleFlags}}
`

const commandHelpTemplate = `{{.HelpName}} - {{.Usage}}

USAGE: {{.HelpName}} [FLAGS] {{.ArgsUsage}}
EXAMPLES_HERE
FLAGS:
{{flagLines .VisibleFlags}}{{moreLine .HelpName .VisibleFlags}}
`

// CommandHelp is a subcommand's -h (its CustomHelpTemplate) with its
// examples.
func CommandHelp(examples string) string {
	ex := ""
	if examples = strings.TrimSpace(examples); examples != "" {
		ex = "\nEXAMPLES:\n" + indent(examples) + "\n"
	}
	return strings.Replace(commandHelpTemplate, "EXAMPLES_HERE", ex, 1)
}

func init() {
	cli.CommandHelpTemplate = CommandHelp("")
	funcs := map[string]any{
		"usageLine": func(a *cli.App) string {
			if a.UsageText != "" {
				return a.UsageText
			}
			if len(a.VisibleCommands()) > 0 {
				return a.Name + " COMMAND [FLAGS] [ARGS...]   (" + a.Name + " help COMMAND)"
			}
			return strings.TrimSpace(a.Name + " [FLAGS] " + a.ArgsUsage)
		},
		"examples": func(a *cli.App) string {
			s, _ := a.Metadata["examples"].(string)
			return s
		},
		"flagLines": flagLines,
		"clip":      clip,
		"moreLine":  moreLine,
	}
	print := cli.HelpPrinterCustom
	cli.HelpPrinter = func(w io.Writer, templ string, data any) {
		if a, ok := data.(*cli.App); ok && len(a.VisibleCommands()) > 0 {
			// the umbrella command: its commands after the flags
			templ = strings.Replace(appHelpTemplate, "FLAGS:\n{{flagLines .VisibleFlags}}",
				"COMMANDS:\n{{range .VisibleCommands}}   {{printf \"%-16s\" .Name}}{{clip .Usage 81}}\n{{end}}", 1)
		}
		print(w, templ, data, funcs)
	}
}

// flagNames is "-p, --pid PID" (short names first, the value's name once).
func flagNames(f cli.Flag) string {
	names := slices.Clone(f.Names())
	slices.SortStableFunc(names, func(a, b string) int { return len(a) - len(b) })
	for i, n := range names {
		if len(n) == 1 {
			names[i] = "-" + n
		} else {
			names[i] = "--" + n
		}
	}
	s := strings.Join(names, ", ")
	if df, ok := f.(cli.DocGenerationFlag); ok && df.TakesValue() {
		name, _ := unquoteUsage(df.GetUsage())
		if name == "" {
			name = "VALUE"
		}
		s += " " + name
	}
	return s
}

// unquoteUsage splits a usage text into the name in its first `back
// quotes` (the value's placeholder, as urfave/cli takes it) and the text
// without the quotes.
func unquoteUsage(u string) (string, string) {
	i := strings.IndexByte(u, '`')
	if i < 0 {
		return "", u
	}
	j := strings.IndexByte(u[i+1:], '`')
	if j < 0 {
		return "", u
	}
	name := u[i+1 : i+1+j]
	return name, u[:i] + name + u[i+2+j:]
}

// flagUsage is a flag's description as -h shows it: its first clause,
// where the whole one would run past the width.
func flagUsage(f cli.Flag, room int) string {
	df, ok := f.(cli.DocGenerationFlag)
	if !ok {
		return ""
	}
	_, u := unquoteUsage(df.GetUsage())
	return clip(u, room)
}

// clip is u's first clause where the whole would run past room columns.
func clip(u string, room int) string {
	if len(u) <= room {
		return u
	}
	// the first clause, up to the earliest of these that leaves one that
	// says something (not just "with --direct")
	const least = 16
	cut := -1
	for _, sep := range []string{"; ", " (", ": ", ", "} {
		i := strings.Index(u, sep)
		for i >= 0 && i < least {
			j := strings.Index(u[i+len(sep):], sep)
			if j < 0 {
				i = -1
				break
			}
			i += len(sep) + j
		}
		if i > 0 && i <= room && (cut < 0 || i < cut) {
			cut = i
		}
	}
	if cut > 0 {
		return u[:cut]
	}
	if i := strings.LastIndex(u[:room-3], " "); i > 0 {
		return u[:i] + " ..."
	}
	return u[:room-3] + "..."
}

func flagLines(flags []cli.Flag) string {
	var b strings.Builder
	const col = 28
	for _, f := range flags {
		if moreFlags[f.Names()[0]] {
			continue
		}
		names := flagNames(f)
		pad := col - 3 - len(names)
		if pad < 2 {
			// a long name: its description on the next line
			fmt.Fprintf(&b, "   %s\n%s%s\n", names, strings.Repeat(" ", col), flagUsage(f, helpWidth-col))
			continue
		}
		fmt.Fprintf(&b, "   %s%s%s\n", names, strings.Repeat(" ", pad), flagUsage(f, helpWidth-col))
	}
	return b.String()
}

func moreLine(name string, flags []cli.Flag) string {
	var more []string
	for _, f := range flags {
		if n := f.Names()[0]; moreFlags[n] && n != "help" && n != "version" {
			more = append(more, "--"+n)
		}
	}
	line := "Every flag, the JSON fields and the account: man 8 " + strings.Fields(name)[0]
	if len(more) == 0 {
		return "\n" + line
	}
	return "\n" + wrapWords("More flags: "+strings.Join(more, " "), helpWidth, "   ") + "\n" + line
}

// wrapWords breaks s at spaces into lines of at most width columns, the
// ones after the first indented.
func wrapWords(s string, width int, indent string) string {
	var b strings.Builder
	line := ""
	for _, w := range strings.Fields(s) {
		if line != "" && len(line)+1+len(w) > width {
			b.WriteString(line + "\n")
			line = indent + w
			continue
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	b.WriteString(line)
	return b.String()
}

// Manual is app's man page (section 8, as bcc's tools): NAME, SYNOPSIS,
// the whole DESCRIPTION (JSON fields and account included), every flag
// with its whole description, and EXAMPLES, rendered from the same
// definitions as -h.
func Manual(app *cli.App) ([]byte, error) {
	a := *app
	a.UsageText = strings.TrimSpace(a.Name + " [FLAGS] " + a.ArgsUsage)
	if len(a.VisibleCommands()) > 0 {
		a.UsageText = a.Name + " COMMAND [FLAGS] [ARGS...]"
	}
	md, err := a.ToMarkdown()
	if err != nil {
		return nil, fmt.Errorf("%s: the man page: %w", app.Name, err)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "%% %s 8\n\n%s", strings.ToUpper(app.Name), md)
	if ex, _ := app.Metadata["examples"].(string); ex != "" {
		fmt.Fprintf(&b, "\n# EXAMPLES\n\n```\n%s\n```\n", strings.TrimRight(ex, "\n"))
	}
	return md2man.Render(b.Bytes()), nil
}
