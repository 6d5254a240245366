// Package runtime is what every gpubpf tool calls to reach GPU kernels and
// the CUDA libraries: it loads a BPF collection, splits it into CPU programs
// (real kernel eBPF, attached as uprobes) and GPU programs (compiled to PTX
// and injected into the application's kernels through the in-process
// agent), places the maps both sides share, and reads them back.
//
// Nothing tool-specific lives here; the tools differ only in the BPF
// programs they load and how they render what comes back.
//
// The pieces it drives live in sub-packages, each with one job:
//
//	jit          eBPF -> PTX compiler
//	gpumap       memory layout of GPU maps and their host-side readers
//	fatbin       fatbin/cubin readers (what the agent hands over)
//	ptx          PTX module model
//	instrument   passes that inject probes into PTX and alias globals
//	agent        the C agent preloaded into CUDA processes
//	agentproto   its wire protocol
//	agentclient  the Go side of its control socket
package runtime
