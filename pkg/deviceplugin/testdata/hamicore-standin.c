/*
 * A stand-in for HAMi-core's libvgpu.so in tests: preloaded into a
 * process, it records what HAMi-core would be given, parsed by
 * HAMi-core's rules (a limit is bytes, or a number with a K, M or G
 * suffix, either case), into the file $GPUSHARE_STANDIN_OUT. It exports
 * the hooks the node daemon looks for (cdi.HAMiCoreHooks), which do
 * nothing here.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long long limit_bytes(const char *v) {
	char *end;
	long long n = strtoll(v, &end, 10);
	switch (*end) {
	case 'k': case 'K': return n << 10;
	case 'm': case 'M': return n << 20;
	case 'g': case 'G': return n << 30;
	case '\0': return n;
	}
	return -1;
}

__attribute__((constructor)) static void record(void) {
	const char *out = getenv("GPUSHARE_STANDIN_OUT");
	if (!out) return;
	FILE *f = fopen(out, "w");
	if (!f) return;
	fprintf(f, "loaded\n");
	for (int i = 0; i < 16; i++) {
		char name[64];
		snprintf(name, sizeof name, "CUDA_DEVICE_MEMORY_LIMIT_%d", i);
		const char *v = getenv(name);
		if (v) fprintf(f, "memory_limit_%d=%lld\n", i, limit_bytes(v));
	}
	const char *sm = getenv("CUDA_DEVICE_SM_LIMIT");
	if (sm) fprintf(f, "sm_limit=%d\n", atoi(sm));
	const char *cache = getenv("CUDA_DEVICE_MEMORY_SHARED_CACHE");
	if (cache) fprintf(f, "shared_cache=%s\n", cache);
	fclose(f);
}

int cuMemAlloc_v2(void **dptr, unsigned long size) { (void)dptr; (void)size; return 2; /* out of memory */ }
int cuLaunchKernel(void) { return 0; }
