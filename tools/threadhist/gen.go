package threadhist

// The BPF object is generated and committed, so `go build` needs no clang.
//go:generate go tool bpf2go -go-package threadhist -cc clang -cflags "-O2 -g -Wall -I../../bpf -I../../bpf/include" -target bpfel threadhist ../../bpf/threadhist.bpf.c
