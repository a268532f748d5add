/*
 * A stand-in for HAMi-core's libvgpu.so in gpu-check's fake mode. Preloaded
 * into the stand-in CUDA client, it does at load time what HAMi-core does
 * before it enforces anything: it opens its lock in /tmp/vgpulock and its
 * usage cache (CUDA_DEVICE_MEMORY_SHARED_CACHE), and reads the container's
 * memory limit on its first GPU (CUDA_DEVICE_MEMORY_LIMIT_0, else
 * CUDA_DEVICE_MEMORY_LIMIT: bytes, or a number ending in k, m or g). It
 * tells the client, which has no CUDA calls to intercept, through its
 * environment: GPUSHARE_FAKE_HAMI_LIMIT_MIB, or GPUSHARE_FAKE_HAMI_ERROR.
 * It exports the hooks gpushare-node looks for (cdi.HAMiCoreHooks), which
 * do nothing here.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static void fail(const char *what, const char *value) {
	char msg[512];
	snprintf(msg, sizeof msg, "%s%s", what, value ? value : "");
	setenv("GPUSHARE_FAKE_HAMI_ERROR", msg, 1);
}

static int touch(const char *path) {
	int fd = open(path, O_CREAT | O_RDWR, 0666);
	if (fd < 0)
		return -1;
	close(fd);
	return 0;
}

__attribute__((constructor)) static void load(void) {
	const char *cache = getenv("CUDA_DEVICE_MEMORY_SHARED_CACHE");
	const char *v = getenv("CUDA_DEVICE_MEMORY_LIMIT_0");
	char *end;
	unsigned long long n;

	if (touch("/tmp/vgpulock/lock") != 0) {
		fail("cannot open HAMi-core's lock /tmp/vgpulock/lock", NULL);
		return;
	}
	if (cache != NULL && touch(cache) != 0) {
		fail("cannot open CUDA_DEVICE_MEMORY_SHARED_CACHE=", cache);
		return;
	}
	if (v == NULL)
		v = getenv("CUDA_DEVICE_MEMORY_LIMIT");
	if (v == NULL)
		return;
	n = strtoull(v, &end, 10);
	switch (*end) {
	case 'g': case 'G': n <<= 30; end++; break;
	case 'm': case 'M': n <<= 20; end++; break;
	case 'k': case 'K': n <<= 10; end++; break;
	}
	if (end == v || *end != '\0') {
		fail("bad memory limit ", v);
		return;
	}
	char mib[32];
	snprintf(mib, sizeof mib, "%llu", n >> 20);
	setenv("GPUSHARE_FAKE_HAMI_LIMIT_MIB", mib, 1);
}

int cuMemAlloc_v2(void **dptr, unsigned long size) { (void)dptr; (void)size; return 2; /* out of memory */ }
int cuLaunchKernel(void) { return 0; }
