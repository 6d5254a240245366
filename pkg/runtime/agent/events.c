/* Launch events (op launch-events): a tool that reports every launch of the
 * program (gpuevent_snoop) shares a ring with the agent instead of trapping
 * on each launch with a uprobe. Each launch through the agent's wrappers
 * writes one 96-byte record, with the driver's result and the call's
 * duration: two clock reads and a compare-and-swap, no system call, no trap.
 * The ring lives in the tool's memfd, mapped here; its layout is
 * docs/agent-protocol.md's "Launch events".
 *
 * Producers are the program's launching threads; the one consumer is the
 * tool. A slot is claimed by advancing head with a CAS while it is free
 * (head - tail < cap), filled, then published by storing its sequence
 * number (position + 1) last; a full ring counts a drop instead. Records go
 * under g_rw read-held (the launch paths hold it), so a detach, under g_rw
 * write-held, knows no thread still writes into the mapping it unmaps. */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "agent.h"

#define LEV_MAGIC 0x5645474cu /* "LGEV" */
#define LEV_VERSION 1u
#define LEV_HDR 4096u
#define LEV_REC 96u

struct lev_hdr {
	uint32_t magic, version;
	uint64_t cap; /* records, a power of two */
	uint8_t pad0[48];
	uint64_t head; /* producers: next position to claim */
	uint8_t pad1[56];
	uint64_t tail; /* the tool: next position to read */
	uint8_t pad2[56];
	uint64_t dropped; /* launches not recorded: the ring was full */
	uint8_t pad3[56];
};

struct lev_rec {
	uint64_t ts; /* CLOCK_MONOTONIC ns at the call */
	uint32_t dur; /* ns in the driver (saturated) */
	uint32_t tid;
	uint64_t func; /* the CUfunction or CUkernel launched */
	uint32_t grid[3], block[3];
	uint32_t shmem;
	int32_t result;
	uint64_t stream;
	uint64_t caller; /* return address into whoever called the driver */
	uint32_t api;    /* LEV_* */
	uint32_t seq;    /* (position + 1) mod 2^32, stored last */
	uint64_t reserved[2];
};
_Static_assert(sizeof(struct lev_rec) == LEV_REC, "launch-event record size");
_Static_assert(sizeof(struct lev_hdr) <= LEV_HDR, "launch-event header size");

static struct lev_hdr *g_lev;     /* g_rw: written write-held, read read-held */
static void *g_lev_owner;         /* g_rw */
static size_t g_lev_size;         /* g_rw */

int lev_attach(void *owner, int fd, uint64_t size, char *why, size_t whysz, uint64_t *attach_ns)
{
	if (size < LEV_HDR + 2 * LEV_REC || size > (1ull << 32) || (size - LEV_HDR) % LEV_REC) {
		snprintf(why, whysz, "launch-events ring of %llu bytes: want 4096 + a power of two of 96-byte records",
			 (unsigned long long)size);
		return -1;
	}
	uint64_t cap = (size - LEV_HDR) / LEV_REC;
	if (cap & (cap - 1)) {
		snprintf(why, whysz, "launch-events ring of %llu records: want a power of two", (unsigned long long)cap);
		return -1;
	}
	void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED) {
		snprintf(why, whysz, "mapping the launch-events ring: %s", strerror(errno));
		return -1;
	}
	struct lev_hdr *h = m;
	if (h->magic != LEV_MAGIC || h->version != LEV_VERSION || h->cap != cap) {
		munmap(m, size);
		snprintf(why, whysz, "launch-events ring header: magic %#x version %u cap %llu, want %#x %u %llu",
			 h->magic, h->version, (unsigned long long)h->cap, LEV_MAGIC, LEV_VERSION,
			 (unsigned long long)cap);
		return -1;
	}
	pthread_rwlock_wrlock(&g_rw);
	if (g_lev) {
		pthread_rwlock_unlock(&g_rw);
		munmap(m, size);
		snprintf(why, whysz, "another gpubpf tool already takes this process's launch events");
		return -1;
	}
	g_lev = h;
	g_lev_owner = owner;
	g_lev_size = size;
	__atomic_or_fetch(&g_active, ACTIVE_EVENTS, __ATOMIC_RELEASE);
	/* Read after the flag is visible (the locked or above orders it): a
	 * launch whose wrapper starts at or after this time is recorded, so
	 * a tool that saw the launch some other way before can tell the two
	 * apart (docs/agent-protocol.md, op 25). */
	*attach_ns = mono_ns();
	pthread_rwlock_unlock(&g_rw);
	DBG("launch events: a ring of %llu records", (unsigned long long)cap);
	return 0;
}

void lev_detach(void *owner)
{
	pthread_rwlock_wrlock(&g_rw);
	if (!g_lev || (owner && g_lev_owner != owner)) {
		pthread_rwlock_unlock(&g_rw);
		return;
	}
	__atomic_and_fetch(&g_active, ~ACTIVE_EVENTS, __ATOMIC_RELEASE);
	struct lev_hdr *h = g_lev;
	size_t size = g_lev_size;
	g_lev = NULL;
	g_lev_owner = NULL;
	pthread_rwlock_unlock(&g_rw);
	munmap(h, size); /* no launch path is inside it: they write read-held */
}

void lev_record(int api, const void *f, const unsigned grid[3], const unsigned block[3], unsigned shmem,
		CUstream s, CUresult r, uint64_t t0, const void *caller)
{
	struct lev_hdr *h = g_lev;
	if (!h)
		return;
	uint64_t t1 = mono_ns();
	uint64_t mask = h->cap - 1;
	uint64_t pos = __atomic_load_n(&h->head, __ATOMIC_RELAXED);
	for (;;) {
		/* Signed: pos may be stale (another thread claimed it, the tool
		 * read past it), behind tail; the CAS then fails and reloads it.
		 * Unsigned, it wrapped and counted a drop with the ring empty. */
		if ((int64_t)(pos - __atomic_load_n(&h->tail, __ATOMIC_ACQUIRE)) >= (int64_t)h->cap) {
			__atomic_add_fetch(&h->dropped, 1, __ATOMIC_RELAXED);
			return;
		}
		if (__atomic_compare_exchange_n(&h->head, &pos, pos + 1, 1, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
			break;
	}
	struct lev_rec *e = (struct lev_rec *)((char *)h + LEV_HDR + (pos & mask) * LEV_REC);
	uint64_t d = t1 - t0;
	e->ts = t0;
	e->dur = d > 0xffffffffull ? 0xffffffffu : (uint32_t)d;
	e->tid = probe_tid();
	e->func = (uint64_t)(uintptr_t)f;
	for (int i = 0; i < 3; i++) {
		e->grid[i] = grid[i];
		e->block[i] = block[i];
	}
	e->shmem = shmem;
	e->result = (int32_t)r;
	e->stream = (uint64_t)(uintptr_t)s;
	e->caller = (uint64_t)(uintptr_t)caller;
	e->api = (uint32_t)api;
	__atomic_store_n(&e->seq, (uint32_t)(pos + 1), __ATOMIC_RELEASE);
}

/* A fork child's launches are not its parent's tool's: it stops writing
 * (the mapping stays; its memory is the tool's memfd). */
void lev_atfork_child(void)
{
	g_lev = NULL;
	g_lev_owner = NULL;
	__atomic_and_fetch(&g_active, ~ACTIVE_EVENTS, __ATOMIC_RELEASE);
}
