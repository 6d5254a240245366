// Command kernelretsnoop: per-thread GPU kernel exit timestamps.
//
// Its implementation lands with its own issue (see ROADMAP.md); until then
// it says so and exits 1 rather than print anything made up.
package main

import "github.com/gpubpf/gpubpf/pkg/toolkit"

func main() {
	toolkit.Run(toolkit.NotBuilt("kernelretsnoop", "per-thread GPU kernel exit timestamps"))
}
