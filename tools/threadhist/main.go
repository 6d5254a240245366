// Command threadhist: per-thread execution-count histogram of GPU kernels.
//
// Its implementation lands with its own issue (see ROADMAP.md); until then
// it says so and exits 1 rather than print anything made up.
package main

import "github.com/gpubpf/gpubpf/pkg/toolkit"

func main() {
	toolkit.Run(toolkit.NotBuilt("threadhist", "per-thread execution-count histogram of GPU kernels"))
}
