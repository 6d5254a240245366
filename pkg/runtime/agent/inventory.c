/* Inventory of the application's modules, libraries and kernel handles.
 * Updated from the load/handle wrappers (never from launches). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent.h"

pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t g_cond = PTHREAD_COND_INITIALIZER;
struct module *g_mods;
size_t g_nmods;
static size_t g_capmods;
struct kernel *g_kerns;
size_t g_nkerns;
static size_t g_capkerns;
static uint64_t g_next_mod_id = 1;

/* handle -> index+1 in g_kerns (open addressing, power-of-two size). */
static uint32_t *g_khash;
static size_t g_khcap;

static void khash_insert(size_t idx)
{
	size_t m = g_khcap - 1, i = ptr_hash(g_kerns[idx].handle) & m;
	while (g_khash[i])
		i = (i + 1) & m;
	g_khash[i] = (uint32_t)(idx + 1);
}

static int khash_grow(void)
{
	size_t ncap = g_khcap ? g_khcap * 2 : 1024;
	uint32_t *n = calloc(ncap, sizeof(*n));
	if (!n)
		return -1;
	free(g_khash);
	g_khash = n;
	g_khcap = ncap;
	for (size_t i = 0; i < g_nkerns; i++)
		khash_insert(i);
	return 0;
}

struct kernel *inv_kernel_by_handle(void *h)
{
	if (!g_khcap)
		return NULL;
	size_t m = g_khcap - 1, i = ptr_hash(h) & m;
	while (g_khash[i]) {
		struct kernel *k = &g_kerns[g_khash[i] - 1];
		if (k->handle == h)
			return k;
		i = (i + 1) & m;
	}
	return NULL;
}

struct module *inv_module_by_id(uint64_t id)
{
	for (size_t i = 0; i < g_nmods; i++)
		if (g_mods[i].id == id)
			return &g_mods[i];
	return NULL;
}

static struct module *module_by_handle(void *h)
{
	for (size_t i = g_nmods; i > 0; i--)
		if (g_mods[i - 1].handle == h && !g_mods[i - 1].unloaded)
			return &g_mods[i - 1];
	return NULL;
}

/* Is [p, p+n) inside a loaded ELF object (so it stays valid)? */
static int in_loaded_object(const void *p)
{
	Dl_info di;
	return dladdr(p, &di) != 0 && di.dli_fbase != NULL;
}

/* Determines the image's format and size without trusting it too far. */
static void image_shape(const void *img, int *fmt, const uint8_t **start, uint64_t *size)
{
	const uint8_t *b = img;
	*fmt = IF_UNKNOWN;
	*start = img;
	*size = 0;
	if (!b)
		return;
	uint32_t magic;
	memcpy(&magic, b, 4);
	if (magic == FATBIN_WRAPPER_MAGIC) {
		const uint8_t *fb;
		memcpy(&fb, b + 8, sizeof(fb));
		if (!fb)
			return;
		b = fb;
		memcpy(&magic, b, 4);
		*start = b;
	}
	if (magic == FATBIN_MAGIC) {
		uint64_t n;
		memcpy(&n, b + 8, 8);
		if (n > (1ull << 34))
			return;
		*fmt = IF_FATBIN;
		*size = 16 + n;
		return;
	}
	if (b[0] == 0x7f && b[1] == 'E' && b[2] == 'L' && b[3] == 'F' && b[4] == ELFCLASS64) {
		Elf64_Ehdr eh;
		memcpy(&eh, b, sizeof(eh));
		uint64_t end = eh.e_shoff + (uint64_t)eh.e_shnum * eh.e_shentsize;
		uint64_t pend = eh.e_phoff + (uint64_t)eh.e_phnum * eh.e_phentsize;
		if (pend > end)
			end = pend;
		if (end < sizeof(eh) || end > (1ull << 34))
			return;
		*fmt = IF_ELF;
		*size = end;
		return;
	}
	/* PTX text: printable start; size up to the terminating NUL. */
	if (b[0] == '/' || b[0] == '.' || b[0] == '\n' || b[0] == ' ' || b[0] == '\t') {
		*fmt = IF_PTX;
		*size = strnlen((const char *)b, 1u << 30) + 1;
	}
}

static void add_kernel_locked(void *handle, int kind, uint64_t mod_id, CUcontext ctx, void *parent, const char *name);

/* Records a module (and sets *ctxp, if given, to the context it was
 * loaded in); the tools hear of it from the caller (notify). */
static uint64_t add_module(int kind, void *handle, const void *image, const char *path, CUcontext *ctxp)
{
	int fmt = IF_UNKNOWN;
	const uint8_t *start = NULL;
	uint64_t size = 0;
	int owned = 0;
	if (image) {
		image_shape(image, &fmt, &start, &size);
		if (size && !in_loaded_object(start)) {
			/* Heap or temporary buffer: the app may free it after
			 * the load, so keep our own copy. */
			uint8_t *c = malloc(size);
			if (c) {
				memcpy(c, start, size);
				start = c;
				owned = 1;
			} else {
				size = 0;
				start = NULL;
			}
		}
	}
	CUcontext ctx = NULL;
	int dev = -1, primary = 0;
	if (kind >= MK_MODULE_DATA && drv_init() == 0 && D.cuCtxGetCurrent(&ctx) == CUDA_SUCCESS && ctx) {
		/* a module loaded in a device's primary context (cudart's, the
		 * one PyTorch, Triton and NVRTC users load into) shares that
		 * context with the device's libraries: say so, so a tool places
		 * its maps there once */
		CUdevice d;
		if (D.cuCtxGetDevice && D.cuCtxGetDevice(&d) == CUDA_SUCCESS) {
			dev = (int)d;
			primary = primary_of(d) == ctx;
		}
	}
	pthread_mutex_lock(&g_mu);
	if (g_nmods == g_capmods) {
		size_t nc = g_capmods ? g_capmods * 2 : 64;
		struct module *n = realloc(g_mods, nc * sizeof(*n));
		if (!n) {
			pthread_mutex_unlock(&g_mu);
			if (owned)
				free((void *)start);
			return 0;
		}
		g_mods = n;
		g_capmods = nc;
	}
	struct module *m = &g_mods[g_nmods++];
	memset(m, 0, sizeof(*m));
	m->id = g_next_mod_id++;
	m->kind = kind;
	m->handle = handle;
	m->ctx = ctx;
	m->dev = dev;
	m->primary = primary;
	m->fmt = fmt;
	m->image = start;
	m->size = size;
	m->owned_image = owned;
	m->path = path ? strdup(path) : NULL;
	uint64_t id = m->id;
	pthread_mutex_unlock(&g_mu);
	if (ctxp)
		*ctxp = ctx;
	DBG("module %llu loaded (kind %d, format %d, %llu bytes%s%s)", (unsigned long long)id, kind, fmt,
	    (unsigned long long)size, path ? ", " : "", path ? path : "");
	return id;
}

uint64_t inv_add_module(int kind, void *handle, const void *image, const char *path)
{
	uint64_t id = add_module(kind, handle, image, path, NULL);
	if (id)
		server_notify_module(id);
	return id;
}

uint64_t inv_add_late_module(int kind, void *handle, int kkind, void *kernel, const char *name)
{
	CUcontext ctx = NULL;
	uint64_t id = add_module(kind, handle, NULL, NULL, &ctx);
	if (!id)
		return 0;
	pthread_mutex_lock(&g_mu);
	add_kernel_locked(kernel, kkind, id, kkind == KK_FUNCTION ? ctx : NULL, NULL, name);
	pthread_mutex_unlock(&g_mu);
	/* the tool lists the module's kernels as it hears of it: the name
	 * is in the inventory by then */
	server_notify_module(id);
	return id;
}

size_t inv_module_count(void)
{
	pthread_mutex_lock(&g_mu);
	size_t n = g_nmods;
	pthread_mutex_unlock(&g_mu);
	return n;
}

uint64_t inv_module_id(void *handle)
{
	pthread_mutex_lock(&g_mu);
	struct module *m = module_by_handle(handle);
	uint64_t id = m && !m->unloaded ? m->id : 0;
	pthread_mutex_unlock(&g_mu);
	return id;
}

void inv_module_unloaded(void *handle)
{
	pthread_mutex_lock(&g_mu);
	struct module *m = module_by_handle(handle);
	if (m) {
		m->unloaded = 1;
		if (m->owned_image)
			free((void *)m->image);
		m->image = NULL;
		m->size = 0;
		m->owned_image = 0;
	}
	pthread_mutex_unlock(&g_mu);
}

static void add_kernel_locked(void *handle, int kind, uint64_t mod_id, CUcontext ctx, void *parent, const char *name)
{
	struct kernel *k = inv_kernel_by_handle(handle);
	if (k) {
		if (!k->name && name)
			k->name = strdup(name);
		if (mod_id)
			k->module_id = mod_id;
		return;
	}
	if (g_nkerns == g_capkerns) {
		size_t nc = g_capkerns ? g_capkerns * 2 : 256;
		struct kernel *n = realloc(g_kerns, nc * sizeof(*n));
		if (!n)
			return;
		g_kerns = n;
		g_capkerns = nc;
	}
	if ((g_nkerns + 1) * 2 > g_khcap && khash_grow() != 0)
		return;
	k = &g_kerns[g_nkerns];
	memset(k, 0, sizeof(*k));
	k->handle = handle;
	k->kind = kind;
	k->module_id = mod_id;
	k->ctx = ctx;
	k->parent = parent;
	k->name = name ? strdup(name) : NULL;
	khash_insert(g_nkerns);
	g_nkerns++;
}

void inv_add_kernel(void *handle, int kind, void *module_handle, void *parent, const char *name)
{
	if (module_handle && !inv_module_id(module_handle)) {
		/* looked up in a module loaded before the agent came (-p
		 * injected it): the tools hear of the module now, with this
		 * kernel, and can say whether they can instrument it */
		inv_add_late_module(kind == KK_KERNEL ? MK_LIBRARY_DATA : MK_MODULE_DATA, module_handle, kind, handle, name);
		return;
	}
	CUcontext ctx = NULL;
	if (kind == KK_FUNCTION && drv_init() == 0)
		D.cuCtxGetCurrent(&ctx);
	pthread_mutex_lock(&g_mu);
	uint64_t mid = 0;
	if (module_handle) {
		struct module *m = module_by_handle(module_handle);
		if (m)
			mid = m->id;
	}
	if (parent) {
		struct kernel *pk = inv_kernel_by_handle(parent);
		if (pk) {
			mid = pk->module_id;
			if (!name)
				name = pk->name;
		}
	}
	int had = inv_kernel_by_handle(handle) != NULL;
	add_kernel_locked(handle, kind, mid, ctx, parent, name);
	pthread_mutex_unlock(&g_mu);
	/* A new CUfunction of a kernel with active probes must route too. */
	if (!had && parent && __atomic_load_n(&g_active, __ATOMIC_RELAXED)) {
		pthread_rwlock_wrlock(&g_rw);
		pthread_mutex_lock(&g_mu);
		probe_rebuild();
		pthread_mutex_unlock(&g_mu);
		pthread_rwlock_unlock(&g_rw);
	}
}

/* Fills in kernels the app has not asked for yet (lazy loading) and names
 * that were not given at lookup. Driver calls only; g_mu held. */
void inv_enumerate(void)
{
	if (drv_init() != 0)
		return;
	size_t nm = g_nmods;
	for (size_t i = 0; i < nm; i++) {
		struct module *m = &g_mods[i];
		if (m->unloaded)
			continue;
		unsigned n = 0;
		if (m->kind <= MK_LIBRARY_FILE) {
			if (!D.cuLibraryGetKernelCount || !D.cuLibraryEnumerateKernels ||
			    D.cuLibraryGetKernelCount(&n, m->handle) != CUDA_SUCCESS || n == 0 || n > (1u << 20))
				continue;
			CUkernel *ks = calloc(n, sizeof(*ks));
			if (!ks)
				continue;
			if (D.cuLibraryEnumerateKernels(ks, n, m->handle) == CUDA_SUCCESS)
				for (unsigned j = 0; j < n; j++)
					if (ks[j] && !inv_kernel_by_handle(ks[j]))
						add_kernel_locked(ks[j], KK_KERNEL, m->id, NULL, NULL, NULL);
			free(ks);
		} else {
			if (!D.cuModuleGetFunctionCount || !D.cuModuleEnumerateFunctions ||
			    D.cuModuleGetFunctionCount(&n, m->handle) != CUDA_SUCCESS || n == 0 || n > (1u << 20))
				continue;
			CUfunction *fs = calloc(n, sizeof(*fs));
			if (!fs)
				continue;
			if (D.cuModuleEnumerateFunctions(fs, n, m->handle) == CUDA_SUCCESS)
				for (unsigned j = 0; j < n; j++)
					if (fs[j] && !inv_kernel_by_handle(fs[j]))
						add_kernel_locked(fs[j], KK_FUNCTION, m->id, m->ctx, NULL, NULL);
			free(fs);
		}
	}
	for (size_t i = 0; i < g_nkerns; i++) {
		struct kernel *k = &g_kerns[i];
		if (k->name)
			continue;
		const char *nm2 = NULL;
		if (k->kind == KK_KERNEL && D.cuKernelGetName)
			D.cuKernelGetName(&nm2, k->handle);
		else if (k->kind == KK_FUNCTION && D.cuFuncGetName)
			D.cuFuncGetName(&nm2, k->handle);
		if (nm2)
			k->name = strdup(nm2);
	}
}

void inv_reset(void)
{
	/* After fork: the child's CUDA state starts empty. Memory inherited
	 * from the parent is dropped, not freed (it may be mid-update). */
	g_mods = NULL;
	g_nmods = g_capmods = 0;
	g_kerns = NULL;
	g_nkerns = g_capkerns = 0;
	g_khash = NULL;
	g_khcap = 0;
	g_next_mod_id = 1;
}
