// Package examples holds the bundled GPU eBPF programs: compiled by bpf2go
// (make generate) and committed, so `gpubpf run bpf/examples/NAME_bpfel.o`
// works without clang and tests can load them.
package examples

//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -I.. -I../include" -target bpfel -output-stem counter counter ../counter.bpf.c
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -I.. -I../include" -target bpfel -output-stem trace trace ../trace.bpf.c
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -I.. -I../include" -target bpfel -output-stem host_map hostMap ../host_map.bpf.c
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -I.. -I../include" -target bpfel -output-stem mem_trace mem_trace ../mem_trace.bpf.c
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -I.. -I../include" -target bpfel -output-stem direct_run directRun ../direct_run.bpf.c
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -I.. -I../include" -target bpfel -output-stem refused refused ../refused.bpf.c
