#!/usr/bin/env python3
"""A CUDA process for gpushare's gpu-check, on CuPy or PyTorch.

Usage: workload.py probe | alloc MIB CHUNK_MIB | work UNITS

probe      says which library it runs on, or exits 3 saying why none.
alloc      allocates MIB of GPU memory in CHUNK_MIB pieces, stopping at the
           first allocation error, and prints what it got; if it got it
           all, it computes (matrix products) until stdin closes and then
           prints how many it ran.
work       times UNITS matrix products after a warm-up.

Each report is one JSON line on stdout (workload_test.go reads them).
GPUSHARE_GPU_CHECK_WORKLOAD=cupy or pytorch picks the library.
"""

import json
import os
import sys
import threading
import time

N = 4096  # matrix side: 64 MiB per float32 matrix


def emit(**fields):
    print(json.dumps(fields), flush=True)


class CuPy:
    name = "cupy"

    def __init__(self, cp):
        self.cp = cp
        self.a = None

    def alloc(self, mib):
        return self.cp.empty(mib << 20, dtype=self.cp.uint8)

    def is_oom(self, e):
        return isinstance(e, self.cp.cuda.memory.OutOfMemoryError) or "out of memory" in str(e).lower()

    def step(self):
        if self.a is None:
            self.a = self.cp.full((N, N), 1.0001, dtype=self.cp.float32)
        self.b = self.a @ self.a

    def sync(self):
        self.cp.cuda.Device().synchronize()


class Torch:
    name = "pytorch"

    def __init__(self, torch):
        self.torch = torch
        self.a = None

    def alloc(self, mib):
        return self.torch.empty(mib << 20, dtype=self.torch.uint8, device="cuda")

    def is_oom(self, e):
        oom = getattr(self.torch.cuda, "OutOfMemoryError", ())
        return isinstance(e, oom) or "out of memory" in str(e).lower()

    def step(self):
        if self.a is None:
            self.a = self.torch.full((N, N), 1.0001, dtype=self.torch.float32, device="cuda")
        self.b = self.a @ self.a

    def sync(self):
        self.torch.cuda.synchronize()


def load():
    want = os.environ.get("GPUSHARE_GPU_CHECK_WORKLOAD", "")
    why = []
    if want in ("", "cupy"):
        try:
            import cupy

            cupy.cuda.runtime.getDeviceCount()
            return CuPy(cupy), why
        except Exception as e:  # any failure: try the next library
            why.append("cupy: %s: %s" % (type(e).__name__, e))
    if want in ("", "pytorch"):
        try:
            import torch

            if not torch.cuda.is_available():
                raise RuntimeError("torch.cuda.is_available() is False")
            return Torch(torch), why
        except Exception as e:
            why.append("pytorch: %s: %s" % (type(e).__name__, e))
    return None, why


def alloc(w, want, chunk):
    held, got, err, oom = [], 0, "", False
    while got + chunk <= want:
        try:
            held.append(w.alloc(chunk))
        except Exception as e:
            err, oom = "%s: %s" % (type(e).__name__, e), w.is_oom(e)
            break
        got += chunk
    if err and not oom:
        emit(event="error", impl=w.name, allocatedMiB=got, error=err)
        return 1
    w.sync()
    emit(event="allocated", impl=w.name, allocatedMiB=got, allocError=err, oom=oom)
    if err:
        return 0
    closed = threading.Event()

    def wait_eof():
        sys.stdin.read()
        closed.set()

    threading.Thread(target=wait_eof, daemon=True).start()
    n, start = 0, time.perf_counter()
    while not closed.is_set() and time.perf_counter() - start < 600:
        w.step()
        w.sync()
        n += 1
    emit(event="done", impl=w.name, iterations=n, seconds=time.perf_counter() - start)
    return 0


def work(w, units):
    for _ in range(3):
        w.step()
    w.sync()
    start = time.perf_counter()
    for _ in range(units):
        w.step()
    w.sync()
    emit(event="done", impl=w.name, units=units, seconds=time.perf_counter() - start)
    return 0


def main(argv):
    if len(argv) < 2 or argv[1] not in ("probe", "alloc", "work"):
        emit(event="error", error="usage: workload.py probe | alloc MIB CHUNK_MIB | work UNITS")
        return 2
    w, why = load()
    if w is None:
        emit(event="error", error="; ".join(why))
        return 3
    if argv[1] == "probe":
        emit(event="probe", impl=w.name)
        return 0
    if argv[1] == "alloc":
        return alloc(w, int(argv[2]), int(argv[3]))
    return work(w, int(argv[2]))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
