/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Minimal, vmlinux-free types for gpubpf BPF programs.
 *
 * Tools must build on machines without BTF-generated vmlinux.h and their GPU
 * programs never touch kernel structures, so this header carries only the
 * integer types, the map/flag constants the suite uses and the x86-64
 * struct pt_regs that uprobes read arguments from.
 */
#ifndef __GPUBPF_TYPES_H
#define __GPUBPF_TYPES_H

typedef signed char __s8;
typedef unsigned char __u8;
typedef short __s16;
typedef unsigned short __u16;
typedef int __s32;
typedef unsigned int __u32;
typedef long long __s64;
typedef unsigned long long __u64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u64 __be64;
typedef __u32 __wsum;

typedef __u8 u8;
typedef __s8 s8;
typedef __u16 u16;
typedef __s16 s16;
typedef __u32 u32;
typedef __s32 s32;
typedef __u64 u64;
typedef __s64 s64;

typedef _Bool bool;
#define true 1
#define false 0

#ifndef NULL
#define NULL ((void *)0)
#endif

enum bpf_map_type {
	BPF_MAP_TYPE_UNSPEC = 0,
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_PROG_ARRAY = 3,
	BPF_MAP_TYPE_PERF_EVENT_ARRAY = 4,
	BPF_MAP_TYPE_PERCPU_HASH = 5,
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_STACK_TRACE = 7,
	BPF_MAP_TYPE_LRU_HASH = 9,
	BPF_MAP_TYPE_RINGBUF = 27,
};

/* Flags for bpf_map_update_elem. */
enum {
	BPF_ANY = 0,
	BPF_NOEXIST = 1,
	BPF_EXIST = 2,
	BPF_F_LOCK = 4,
};

/* Map creation flags. */
enum {
	BPF_F_NO_PREALLOC = (1U << 0),
	BPF_F_RDONLY_PROG = (1U << 7),
	BPF_F_MMAPABLE = (1U << 10),
};

/* Flags for bpf_perf_event_output and bpf_get_stackid. */
#define BPF_F_INDEX_MASK 0xffffffffULL
#define BPF_F_CURRENT_CPU BPF_F_INDEX_MASK
#define BPF_F_USER_STACK (1ULL << 8)

/* Flags for bpf_ringbuf_output/submit/discard. */
enum {
	BPF_RB_NO_WAKEUP = (1ULL << 0),
	BPF_RB_FORCE_WAKEUP = (1ULL << 1),
};

/* Flags for bpf_ringbuf_query. */
enum {
	BPF_RB_AVAIL_DATA = 0,
	BPF_RB_RING_SIZE = 1,
	BPF_RB_CONS_POS = 2,
	BPF_RB_PROD_POS = 3,
};

/*
 * x86-64 register file as the kernel lays it out. Defining __VMLINUX_H__
 * makes bpf_tracing.h use these kernel field names (di, si, ...) for
 * PT_REGS_PARM*() and PT_REGS_RC().
 */
struct pt_regs {
	unsigned long r15;
	unsigned long r14;
	unsigned long r13;
	unsigned long r12;
	unsigned long bp;
	unsigned long bx;
	unsigned long r11;
	unsigned long r10;
	unsigned long r9;
	unsigned long r8;
	unsigned long ax;
	unsigned long cx;
	unsigned long dx;
	unsigned long si;
	unsigned long di;
	unsigned long orig_ax;
	unsigned long ip;
	unsigned long cs;
	unsigned long flags;
	unsigned long sp;
	unsigned long ss;
};
#define __VMLINUX_H__ 1

#ifndef __TARGET_ARCH_x86
#define __TARGET_ARCH_x86 1
#endif

#endif /* __GPUBPF_TYPES_H */
