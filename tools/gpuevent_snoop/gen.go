package gpuevent_snoop

// The BPF object is generated and committed, so `go build` needs no clang.
//go:generate go tool bpf2go -go-package gpuevent_snoop -cc clang -cflags "-O2 -g -Wall -I../../bpf -I../../bpf/include" -target bpfel -type ges_event -type ges_name_event gpueventsnoop ../../bpf/gpuevent_snoop.bpf.c
// The same without what needs kernel BTF (sessions, the CO-RE read of the
// executable's load address), for kernels built without it.
//go:generate go tool bpf2go -go-package gpuevent_snoop -cc clang -cflags "-O2 -g -Wall -DGES_NO_BTF -I../../bpf -I../../bpf/include" -target bpfel gpueventsnoopnobtf ../../bpf/gpuevent_snoop.bpf.c
