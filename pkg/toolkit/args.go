package toolkit

import (
	"strings"

	"github.com/urfave/cli/v2"
)

// interspersed moves the flags a user wrote after positional arguments
// (`gpubpf run OBJ -p 42`, as bcc tools accept) in front of them, so that
// urfave/cli, which stops at the first positional argument, sees them.
// Everything from "--" on is the traced command's own and stays as is.
// args[0] is the program; a first argument naming one of app's commands is
// kept in place and that command's flags are used.
func interspersed(app *cli.App, args []string) []string {
	if len(args) < 2 {
		return args
	}
	head, rest := args[:1], args[1:]
	flags := app.Flags
	if len(rest) > 0 {
		if cmd := app.Command(rest[0]); cmd != nil {
			head, rest, flags = args[:2], args[2:], cmd.Flags
		}
	}
	takesValue := map[string]bool{}
	known := map[string]bool{}
	for _, f := range flags {
		_, isBool := f.(*cli.BoolFlag)
		for _, n := range f.Names() {
			known[n] = true
			takesValue[n] = !isBool
		}
	}
	var opts, pos []string
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		if a == "--" {
			pos = append(pos, rest[i:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' {
			pos = append(pos, a)
			continue
		}
		opts = append(opts, a)
		name := strings.TrimLeft(a, "-")
		if strings.Contains(name, "=") || !known[name] || !takesValue[name] {
			continue
		}
		if i+1 < len(rest) {
			i++
			opts = append(opts, rest[i])
		}
	}
	out := append(append([]string(nil), head...), opts...)
	return append(out, pos...)
}
