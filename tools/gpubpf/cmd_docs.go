package main

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gpubpf/gpubpf/pkg/toolkit"
)

// The man pages and shell completions come from the commands' own flag
// definitions (make man writes man/, make install puts them in place; CI
// checks that the committed pages are current).

func init() {
	register(&cli.Command{
		Name:      "man",
		Usage:     "write the suite's man pages (section 8) into DIR",
		ArgsUsage: "DIR",
		Hidden:    true,
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return toolkit.Usagef("gpubpf man DIR: the directory to write gpubpf.8 and a page per tool into")
			}
			return writeManuals(c.Args().First())
		},
	})
	register(&cli.Command{
		Name:      "completion",
		Usage:     "print the bash, zsh or fish completion of gpubpf and its tools",
		ArgsUsage: "SHELL",
		CustomHelpTemplate: toolkit.CommandHelp(`source <(gpubpf completion bash)       # in ~/.bashrc (make install puts them in place)
gpubpf completion fish > ~/.config/fish/completions/gpubpf.fish`),
		Action: func(c *cli.Context) error {
			s, err := completion(c.Args().First())
			if err != nil {
				return err
			}
			fmt.Fprint(c.App.Writer, s)
			return nil
		},
	})
}

// names is gpubpf and its tools, sorted.
func names() []string {
	n := []string{"gpubpf"}
	for t := range tools {
		n = append(n, t)
	}
	slices.Sort(n[1:])
	return n
}

// appOf is the command a name runs: a tool, or gpubpf itself.
func appOf(name string) *cli.App {
	if mk := tools[name]; mk != nil {
		return mk()
	}
	return newApp()
}

func writeManuals(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, name := range names() {
		page, err := toolkit.Manual(appOf(name))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name+".8"), page, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// completion is the script of shell, made from the commands' flags: the
// flags of the command being typed after a -, gpubpf's commands after
// gpubpf, file names otherwise.
func completion(shell string) (string, error) {
	all := strings.Join(names(), " ")
	words := wordTable()
	switch shell {
	case "bash", "zsh":
		var cases strings.Builder
		for _, k := range slices.Sorted(maps.Keys(words)) {
			fmt.Fprintf(&cases, "\t%s) echo '%s' ;;\n", k, strings.Join(words[k], " "))
		}
		fn := `_gpubpf_words() {
	case $1 in
` + cases.String() + `	esac
}
# the command whose words to offer: a tool, gpubpf, or gpubpf:SUBCOMMAND
_gpubpf_cmd() {
	local cmd=${1##*/}
	if [[ $cmd == gpubpf && -n $2 ]]; then
		case " ` + all + ` " in *" $2 "*) cmd=$2 ;; *) cmd=gpubpf:$2 ;; esac
	fi
	echo "$cmd"
}
`
		if shell == "bash" {
			return "# gpubpf bash completion (gpubpf completion bash)\n" + fn + `_gpubpf_complete() {
	local cur=${COMP_WORDS[COMP_CWORD]} sub=
	((COMP_CWORD > 1)) && sub=${COMP_WORDS[1]}
	local cmd=$(_gpubpf_cmd "${COMP_WORDS[0]}" "$sub")
	if [[ $cur == -* ]]; then
		COMPREPLY=($(compgen -W "$(_gpubpf_words "$cmd")" -- "$cur"))
	elif [[ $cmd == gpubpf ]]; then
		COMPREPLY=($(compgen -W "$(_gpubpf_words gpubpf)" -- "$cur"))
	fi
}
complete -o bashdefault -o default -F _gpubpf_complete ` + all + "\n", nil
		}
		return "#compdef " + all + "\n# gpubpf zsh completion (gpubpf completion zsh > ${fpath[1]}/_gpubpf)\n" + fn + `local sub=
((CURRENT > 2)) && sub=${words[2]}
local cmd=$(_gpubpf_cmd "${words[1]}" "$sub")
if [[ ${words[CURRENT]} == -* || $cmd == gpubpf ]]; then
	compadd -- ${=$(_gpubpf_words "$cmd")}
else
	_files
fi
`, nil
	case "fish":
		var b strings.Builder
		for _, name := range names() {
			s, err := appOf(name).ToFishCompletion()
			if err != nil {
				return "", fmt.Errorf("%s: fish completion: %w", name, err)
			}
			b.WriteString(s)
		}
		return b.String(), nil
	}
	return "", toolkit.Usagef("gpubpf completion %q: want bash, zsh or fish", shell)
}

// wordTable is, per command (a tool, gpubpf, gpubpf:SUBCOMMAND), what
// completes: its visible flags (and gpubpf's commands).
func wordTable() map[string][]string {
	flagWords := func(fs []cli.Flag) []string {
		var w []string
		for _, f := range fs {
			if vf, ok := f.(cli.VisibleFlag); ok && !vf.IsVisible() {
				continue
			}
			for _, n := range f.Names() {
				if len(n) == 1 {
					w = append(w, "-"+n)
				} else {
					w = append(w, "--"+n)
				}
			}
		}
		return w
	}
	t := map[string][]string{}
	for name, mk := range tools {
		t[name] = flagWords(mk().Flags)
	}
	app := newApp()
	for _, c := range app.VisibleCommands() {
		t["gpubpf"] = append(t["gpubpf"], c.Name)
		if tools[c.Name] == nil {
			t["gpubpf:"+c.Name] = flagWords(c.Flags)
		}
	}
	t["gpubpf"] = append(t["gpubpf"], "help", "--help", "--version")
	return t
}
