package kernel_trace

// The BPF object is generated and committed, so `go build` needs no clang.
//go:generate go tool bpf2go -go-package kernel_trace -cc clang -cflags "-O2 -mcpu=v3 -g -Wall -I../../bpf -I../../bpf/include" -target bpfel kerneltrace ../../bpf/kernel_trace.bpf.c
