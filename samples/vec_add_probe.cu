// vec_add_probe: vec_add with a hand-written CUDA probe at kernel entry that
// does what bpf/bench/probe_counter.bpf.c does (globaltimer, thread index,
// per-thread counter): the ideal the compiled eBPF probe is measured against.
#define VEC_ADD_PROBE 1
#include "vec_add.cu"
