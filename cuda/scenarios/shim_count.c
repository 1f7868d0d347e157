/*
 * shim_count: a minimal LD_PRELOAD interposer used by the simulated-GPU tests (not a
 * scenario). It exports cuMemAlloc_v2, forwards to the next definition and reports each
 * call on stderr as "SHIM cuMemAlloc_v2". It hooks neither dlsym nor cuGetProcAddress, so it
 * sees only callers that reach the driver through its exported symbols.
 * Build: cc -shared -fPIC shim_count.c -o libshim_count.so -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>

typedef int (*alloc_t)(unsigned long long *, size_t);

int cuMemAlloc_v2(unsigned long long *dptr, size_t bytesize)
{
    static alloc_t next;
    if (!next)
        next = (alloc_t)dlsym(RTLD_NEXT, "cuMemAlloc_v2");
    fprintf(stderr, "SHIM cuMemAlloc_v2 %zu\n", bytesize);
    return next ? next(dptr, bytesize) : 999;
}
