// Command promcheck checks a Prometheus text exposition on stdin the way
// `promtool check metrics` does (the client library's promlint over the
// official text parser), for scripts/gpu/fleet-check.sh on the GPU machine,
// where promtool (48 MB) would not fit the bundle. Prints each problem;
// exits 1 when there is one, 2 when the text does not parse.
package main

import (
	"fmt"
	"os"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
)

func main() {
	problems, err := promlint.New(os.Stdin).Lint()
	if err != nil {
		fmt.Fprintf(os.Stderr, "promcheck: %v\n", err)
		os.Exit(2)
	}
	for _, p := range problems {
		fmt.Printf("%s: %s\n", p.Metric, p.Text)
	}
	if len(problems) > 0 {
		os.Exit(1)
	}
}
