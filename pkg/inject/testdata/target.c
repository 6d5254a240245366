/* A program for the injection tests: it answers lines on stdin and keeps
 * its threads busy in the ways a real program is when a tool attaches.
 *   target wait   main thread blocked in read(2) on stdin; a helper thread
 *                 calls malloc/free in a loop (often inside libc's locks)
 *   target spin   main thread computing in registers outside libc (the
 *                 thread injection must use and fully restore), a helper
 *                 thread blocked on stdin
 *   target churn  main thread in malloc/free (mostly inside libc: not a
 *                 safe place), a helper thread blocked on stdin
 * "check" answers "ok N" (N results compared) or "CORRUPT" if a result of
 * the register-held computation ever changed.
 * With -DSTATIC_TARGET (linked -static) it only sleeps. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile long compared;
static volatile int corrupt;

static volatile double seed = 1.0; /* keeps the compiler from computing work() once */

static double work(void)
{
	double x = seed, y = 0.0, z = 3.0;
	for (int i = 0; i < 200000; i++) {
		x = x * 1.0000001 + 1e-9;
		y += x * z;
		z = z * 0.9999999 + 1e-7;
	}
	return x + y + z;
}

static void *spin(void *arg)
{
	(void)arg;
	double want = work();
	for (;;) {
		if (work() != want)
			corrupt = 1;
		compared++;
	}
	return NULL;
}

static void *churn(void *arg)
{
	(void)arg;
	for (;;) {
		void *p[64];
		for (int i = 0; i < 64; i++)
			p[i] = malloc(16 + i * 64);
		for (int i = 0; i < 64; i++)
			free(p[i]);
	}
	return NULL;
}

static void serve(void)
{
	char line[256];
	while (fgets(line, sizeof line, stdin)) {
		if (!strncmp(line, "check", 5)) {
			if (corrupt)
				printf("CORRUPT\n");
			else
				printf("ok %ld\n", compared);
		} else {
			printf("pong\n");
		}
		fflush(stdout);
	}
	exit(0);
}

static void *serve_thread(void *arg)
{
	(void)arg;
	serve();
	return NULL;
}

int main(int argc, char **argv)
{
#ifdef STATIC_TARGET
	printf("READY\n");
	fflush(stdout);
	for (;;)
		sleep(1);
#endif
	pthread_t t;
	const char *mode = argc > 1 ? argv[1] : "wait";
	printf("READY\n");
	fflush(stdout);
	if (!strcmp(mode, "spin") || !strcmp(mode, "churn")) {
		pthread_create(&t, NULL, serve_thread, NULL);
		if (!strcmp(mode, "spin"))
			spin(NULL);
		churn(NULL);
	}
	pthread_create(&t, NULL, churn, NULL);
	serve();
	return 0;
}
