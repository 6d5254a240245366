package toolkit

import (
	"slices"
	"testing"

	"github.com/urfave/cli/v2"
)

func TestInterspersed(t *testing.T) {
	app := NewApp("t", "", "")
	app.Flags = CommonFlags()
	app.Commands = []*cli.Command{{Name: "run", Flags: append(CommonFlags(), &cli.StringFlag{Name: "program"})}}
	for _, tc := range []struct{ in, want []string }{
		{[]string{"t", "run", "obj.o", "-p", "42"}, []string{"t", "run", "-p", "42", "obj.o"}},
		{[]string{"t", "run", "obj.o", "-j", "--", "./app", "-p", "1"}, []string{"t", "run", "-j", "obj.o", "--", "./app", "-p", "1"}},
		{[]string{"t", "run", "--program=x", "obj.o", "-k", "vec*"}, []string{"t", "run", "--program=x", "-k", "vec*", "obj.o"}},
		{[]string{"t", "-i", "1", "--", "./app"}, []string{"t", "-i", "1", "--", "./app"}},
		{[]string{"t", "--", "./app", "-i", "1"}, []string{"t", "--", "./app", "-i", "1"}},
	} {
		if got := interspersed(app, tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("%v: got %v, want %v", tc.in, got, tc.want)
		}
	}
}
