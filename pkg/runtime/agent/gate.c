/* The driver's lock: launching threads pause while a tool request starves. */
#define _GNU_SOURCE
#include "server.h"

/* ---------------- the driver's lock ---------------- */

/* The driver takes a lock shared for launches and exclusively for memory
 * operations, and lets new sharers in while a writer waits: a program that
 * launches back to back from many threads starves a tool's request (seen on
 * the H100: an allocation not done after 30 s with 8 launching threads,
 * fault case 2d). So while a request has been in the driver for GATE_AFTER_NS,
 * each launching thread pauses until it is through, for at most GATE_WAIT_NS,
 * then launches for GATE_EVERY_NS: the lock comes free, and a program's
 * launch rate loses at most a tenth while a request takes long (a JIT, a wait
 * for its kernels). On a machine whose CPUs are all busy the request's thread
 * may not run within a pause: each further pause for the same request is
 * twice as long, up to GATE_WAIT_MAX_NS (the launch rate then gives up more,
 * for as long as that request is starved). */
#define GATE_AFTER_NS 2000000ull
#define GATE_WAIT_NS 2000000ull
#define GATE_WAIT_MAX_NS 64000000ull
#define GATE_EVERY_NS 20000000ull
static uint64_t g_req_since; /* when the request in the driver began (0: none) */
static int g_req_busy;       /* requests being served */
static __thread uint64_t t_gate_next;
static __thread uint64_t t_gate_req, t_gate_wait; /* the request this thread paused for, and how long */

void req_begin(void)
{
	__atomic_add_fetch(&g_req_busy, 1, __ATOMIC_ACQ_REL);
	__atomic_store_n(&g_req_since, mono_ns(), __ATOMIC_RELEASE);
	__atomic_or_fetch(&g_active, ACTIVE_GATE, __ATOMIC_RELEASE);
}

void req_end(void)
{
	if (__atomic_sub_fetch(&g_req_busy, 1, __ATOMIC_ACQ_REL) == 0) {
		__atomic_store_n(&g_req_since, 0, __ATOMIC_RELEASE);
		__atomic_and_fetch(&g_active, ~ACTIVE_GATE, __ATOMIC_RELEASE);
	}
}

void drv_gate(void)
{
	uint64_t since = __atomic_load_n(&g_req_since, __ATOMIC_ACQUIRE);
	if (LIKELY(!since) || g_agent_thread)
		return;
	uint64_t now = mono_ns();
	if (now < since + GATE_AFTER_NS || now < t_gate_next)
		return;
	if (t_gate_req != since) {
		t_gate_req = since;
		t_gate_wait = GATE_WAIT_NS;
	} else if (t_gate_wait < GATE_WAIT_MAX_NS) {
		t_gate_wait *= 2;
	}
	uint64_t until = now + t_gate_wait;
	struct timespec nap = {0, 50000};
	while (__atomic_load_n(&g_req_since, __ATOMIC_ACQUIRE) == since && (now = mono_ns()) < until)
		nanosleep(&nap, NULL);
	t_gate_next = now + GATE_EVERY_NS;
}

