package kernelretsnoop

// The BPF object is generated and committed, so `go build` needs no clang.
//go:generate go tool bpf2go -go-package kernelretsnoop -cc clang -cflags "-O2 -mcpu=v3 -g -Wall -I../../bpf -I../../bpf/include" -target bpfel kernelretsnoop ../../bpf/kernelretsnoop.bpf.c
