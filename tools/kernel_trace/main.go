// Command kernel_trace: per-thread GPU kernel entry events.
//
// Its implementation lands with its own issue (see ROADMAP.md); until then
// it says so and exits 1 rather than print anything made up.
package main

import "github.com/gpubpf/gpubpf/pkg/toolkit"

func main() {
	toolkit.Run(toolkit.NotBuilt("kernel_trace", "per-thread GPU kernel entry events"))
}
