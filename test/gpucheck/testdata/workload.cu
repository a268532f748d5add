// A CUDA process for gpushare's gpu-check, where neither CuPy nor PyTorch
// is installed: built with nvcc on the machine under test. Same protocol
// as workload.py:
//
//   workload probe | alloc MIB CHUNK_MIB | work UNITS
//
// alloc allocates MIB in CHUNK_MIB pieces (cudaMalloc), stopping at the
// first error; if it got it all, it runs the spin kernel until stdin
// closes. work times UNITS launches of the spin kernel after a warm-up.
// Each report is one JSON line on stdout.
#include <cuda_runtime.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

// Enough blocks for many waves on any GPU, so that the time scales with
// the SMs a client may use (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE).
static const int kBlocks = 16384, kThreads = 256, kIters = 4096;

__global__ void spin(float *out, int iters) {
	float a = threadIdx.x * 1e-3f;
	for (int i = 0; i < iters; i++) a = fmaf(a, 1.0001f, 1e-7f);
	if (a == -1.0f) out[0] = a;  // never true; keeps the loop
}

static double now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int fail(const char *what, cudaError_t e) {
	printf("{\"event\":\"error\",\"impl\":\"nvcc\",\"error\":\"%s: %s\"}\n", what, cudaGetErrorString(e));
	fflush(stdout);
	return 1;
}

// step launches the kernel once and waits for it.
static cudaError_t step(float *out) {
	spin<<<kBlocks, kThreads>>>(out, kIters);
	return cudaDeviceSynchronize();
}

// closed reports whether stdin has reached its end, without waiting.
static int closed(void) {
	struct pollfd p = {0, POLLIN, 0};
	char buf[256];
	if (poll(&p, 1, 0) <= 0) return 0;
	return read(0, buf, sizeof buf) <= 0;
}

static int alloc(long want, long chunk) {
	float *out;
	cudaError_t e = cudaMalloc(&out, sizeof(float));
	if (e != cudaSuccess) return fail("cudaMalloc", e);
	long got = 0;
	const char *err = "";
	int oom = 0;
	while (got + chunk <= want) {
		void *p;
		e = cudaMalloc(&p, (size_t)chunk << 20);
		if (e == cudaErrorMemoryAllocation) {
			err = cudaGetErrorString(e);
			oom = 1;
			break;
		}
		if (e != cudaSuccess) return fail("cudaMalloc", e);
		got += chunk;
	}
	printf("{\"event\":\"allocated\",\"impl\":\"nvcc\",\"allocatedMiB\":%ld,\"allocError\":\"%s\",\"oom\":%s}\n", got, err,
	       oom ? "true" : "false");
	fflush(stdout);
	if (oom) return 0;
	long n = 0;
	double start = now();
	while (!closed() && now() - start < 600) {
		if ((e = step(out)) != cudaSuccess) return fail("spin kernel", e);
		n++;
	}
	printf("{\"event\":\"done\",\"impl\":\"nvcc\",\"iterations\":%ld,\"seconds\":%f}\n", n, now() - start);
	return 0;
}

static int work(long units) {
	float *out;
	cudaError_t e = cudaMalloc(&out, sizeof(float));
	if (e != cudaSuccess) return fail("cudaMalloc", e);
	for (int i = 0; i < 3; i++)
		if ((e = step(out)) != cudaSuccess) return fail("spin kernel", e);
	double start = now();
	for (long i = 0; i < units; i++) spin<<<kBlocks, kThreads>>>(out, kIters);
	if ((e = cudaDeviceSynchronize()) != cudaSuccess) return fail("spin kernel", e);
	printf("{\"event\":\"done\",\"impl\":\"nvcc\",\"units\":%ld,\"seconds\":%f}\n", units, now() - start);
	return 0;
}

int main(int argc, char **argv) {
	if (argc >= 2 && !strcmp(argv[1], "probe")) {
		int n;
		cudaError_t e = cudaGetDeviceCount(&n);
		if (e != cudaSuccess) return fail("cudaGetDeviceCount", e);
		printf("{\"event\":\"probe\",\"impl\":\"nvcc\"}\n");
		return 0;
	}
	if (argc == 4 && !strcmp(argv[1], "alloc")) return alloc(atol(argv[2]), atol(argv[3]));
	if (argc == 3 && !strcmp(argv[1], "work")) return work(atol(argv[2]));
	printf("{\"event\":\"error\",\"impl\":\"nvcc\",\"error\":\"usage: workload probe | alloc MIB CHUNK_MIB | work UNITS\"}\n");
	return 2;
}
