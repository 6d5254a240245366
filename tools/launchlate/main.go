// Command launchlate: CPU launch to GPU start latency of CUDA kernels.
//
// Its implementation lands with its own issue (see ROADMAP.md); until then
// it says so and exits 1 rather than print anything made up.
package main

import "github.com/gpubpf/gpubpf/pkg/toolkit"

func main() {
	toolkit.Run(toolkit.NotBuilt("launchlate", "CPU launch to GPU start latency of CUDA kernels"))
}
