/* Injected by the tests: says it was loaded, from its constructor, after
 * filling every SSE register with garbage, so that a thread whose vector
 * registers injection failed to restore computes wrong results. */
#include <unistd.h>

__attribute__((constructor)) static void loaded(void)
{
	static const char msg[] = "LIB LOADED\n";
#ifdef __x86_64__
	static const double junk[2] = {12345.678, -0.5};
	__asm__ volatile("movupd %0, %%xmm0\n\t"
			 "movupd %%xmm0, %%xmm1\n\tmovupd %%xmm0, %%xmm2\n\tmovupd %%xmm0, %%xmm3\n\t"
			 "movupd %%xmm0, %%xmm4\n\tmovupd %%xmm0, %%xmm5\n\tmovupd %%xmm0, %%xmm6\n\t"
			 "movupd %%xmm0, %%xmm7\n\tmovupd %%xmm0, %%xmm8\n\tmovupd %%xmm0, %%xmm9\n\t"
			 "movupd %%xmm0, %%xmm10\n\tmovupd %%xmm0, %%xmm11\n\tmovupd %%xmm0, %%xmm12\n\t"
			 "movupd %%xmm0, %%xmm13\n\tmovupd %%xmm0, %%xmm14\n\tmovupd %%xmm0, %%xmm15\n\t"
			 :
			 : "m"(junk)
			 : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",
			   "xmm11", "xmm12", "xmm13", "xmm14", "xmm15");
#endif
	(void)!write(1, msg, sizeof msg - 1);
}
