/* SPDX-License-Identifier: BSD-2-Clause */
/* launchlate's records, shared by its BPF program and the tool. */
#ifndef __LAUNCHLATE_H
#define __LAUNCHLATE_H

/* Launch APIs, in the low bits of a stamp's tag (and of launch word 1's
 * top byte as the agent passes it on). */
#define LL_RUNTIME 1	/* cudaLaunchKernel and its variants */
#define LL_DRIVER 2	/* cuLaunchKernel(Ex), cooperative launches */
#define LL_GRAPH_RT 3	/* cudaGraphLaunch */
#define LL_GRAPH_DRV 4	/* cuGraphLaunch */
#define LL_GRAPH_NODE 0xFF /* a kernel node of a graph (the agent's mark) */
/* A runtime-API stamp the driver call it makes has not reached yet: that
 * driver call keeps the earlier, user-visible time. */
#define LL_PENDING 0x80

#define LL_SLOTS 4096	     /* per-thread stamp slots ((tid * 4) % LL_SLOTS) */
#define LL_STARTS (1 << 16) /* kernel starts kept on the GPU (grid id % LL_STARTS) */

/* The stamp a CPU uprobe leaves for the launching thread; the agent copies
 * it into the launch's hidden parameters. */
struct ll_stamp {
	__u64 t;   /* CLOCK_MONOTONIC ns */
	__u64 tag; /* tid << 32 | kind */
};

/* One kernel start, in slot grid % LL_STARTS. */
struct ll_start {
	__u64 grid;  /* grid id (low 48 bits) | kernel index << 48; written last */
	__u64 gpu;   /* %globaltimer as the first thread started */
	__u64 cpu;   /* the launch call's CLOCK_MONOTONIC time, 0: none */
	__u64 info;  /* stream (low 56 bits) | kind << 56 */
};

#endif
