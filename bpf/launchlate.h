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
#define LL_GRAPH_WORD 0xFE /* a kernel node of a graph: the low 56 bits of launch
			    * word 1 are the device address of its graph's stamp
			    * word, which the agent sets before each graph launch
			    * (0: no stamp) */
#define LL_GRAPH_NODE 0xFF /* a kernel node of a graph, no stamp word (the agent's mark) */
#define LL_GRAPH_SEQ 0xFD /* a kernel node the agent swapped into an executable
			   * graph: the low bits of launch word 1 are the node's
			   * id (below LL_SEQ_IDS); the probe counts the node's
			   * runs and records the run's index in place of the
			   * stamp, which the tool finds by that index among the
			   * graph launches' stamps the agent kept */
#define LL_SEQ_IDS (1 << 18) /* the agent's LW_SEQ_IDS */
/* A runtime-API stamp the agent has not taken yet: the driver launch that
 * cudart makes underneath takes it (and clears the mark). */
#define LL_PENDING 0x80

#define LL_SLOTS 4096	     /* per-thread stamp slots ((tid * 4) % LL_SLOTS) */
#define LL_STARTS (1 << 16) /* kernel starts kept on the GPU (grid id % LL_STARTS) */
/* Timed starts of graph kernels, after those: a graph's kernel keeps its
 * grid id from one graph launch to the next, so they take slots in turn
 * (LL_STARTS + n % LL_GRAPH_STARTS, n counting them). */
#define LL_GRAPH_STARTS (1 << 14)

/* The stamp a CPU uprobe leaves for the launching thread; the agent copies
 * it into the launch's hidden parameters. */
struct ll_stamp {
	__u64 t;   /* CLOCK_MONOTONIC ns */
	__u64 tag; /* tid << 32 | kind */
};

/* One kernel start, in slot grid % LL_STARTS (graph kernels: see
 * LL_GRAPH_STARTS). */
struct ll_start {
	__u64 grid;  /* grid id (low 48 bits) | kernel index << 48; written last */
	__u64 gpu;   /* %globaltimer as the first thread started */
	__u64 cpu;   /* the launch call's CLOCK_MONOTONIC time, 0: none (LL_GRAPH_SEQ: the run's index) */
	__u64 info;  /* stream (low 56 bits; 0 for graph kernels, the id for LL_GRAPH_SEQ) | kind << 56 */
};

#endif
