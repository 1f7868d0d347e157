/*
 * Shared helpers of the fragprobe scenario programs.
 *
 * Every memory call a scenario makes is reported as one line on stdout:
 *
 *   FPSCN pid=<pid> tid=<tid> op=<op> api=<function> dev=<ordinal|-1> addr=0x<hex>
 *         size=<bytes> aux=0x<hex> res=<result code>
 *
 * (one line; wrapped here). op is one of
 *   alloc        addr = pointer returned (0 on failure), size = bytes asked, aux = pitch
 *                of pitched allocations, else 0
 *   free         addr = pointer freed, size = bytes it was allocated with
 *   managed      addr, size as alloc; aux = attach flags
 *   async_alloc  addr, size as alloc; aux = stream (cuMemAllocAsync/cudaMallocAsync) or
 *                pool (…FromPoolAsync)
 *   async_free   addr, size as free; aux = stream
 *   reserve      addr = reserved virtual address, size, aux = alignment asked
 *   addr_free    addr, size of the reservation
 *   create       addr = physical allocation handle, size
 *   release      addr = handle, size it was created with
 *   map          addr = virtual address, size, aux = handle
 *   unmap        addr = virtual address, size
 *   meminfo      size = free bytes, aux = total bytes
 * res is the CUresult / cudaError_t returned. Lines are flushed one by one, so output stays
 * whole across fork and exec and when several threads print.
 *
 * The scenarios use only names that exist in NVIDIA's headers; they build against the
 * fragprobe subset (cc -Icuda/include) and against a real toolkit
 * (cc -I$CUDA_HOME/include ... -L$CUDA_HOME/lib64 -lcuda -lcudart).
 */
#ifndef FRAGPROBE_FPSCN_H
#define FRAGPROBE_FPSCN_H

#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>

static inline long fpscn_tid(void) { return (long)syscall(SYS_gettid); }

static inline void fpscn(const char *op, const char *api, int dev, unsigned long long addr,
                         unsigned long long size, unsigned long long aux, int res)
{
    printf("FPSCN pid=%d tid=%ld op=%s api=%s dev=%d addr=0x%llx size=%llu aux=0x%llx res=%d\n",
           (int)getpid(), fpscn_tid(), op, api, dev, addr, size, aux, res);
    fflush(stdout);
}

/* Exit with a message when a setup call (not one under test) fails. */
#define FPSCN_MUST(call)                                                                    \
    do {                                                                                    \
        int fpscn_rc_ = (int)(call);                                                        \
        if (fpscn_rc_ != 0) {                                                               \
            fprintf(stderr, "%s:%d: %s failed with %d\n", __FILE__, __LINE__, #call,          \
                    fpscn_rc_);                                                             \
            exit(1);                                                                        \
        }                                                                                   \
    } while (0)

/* Parses a decimal argument, or returns the default. */
static inline long fpscn_arg(int argc, char **argv, int i, long dflt)
{
    if (argc > i && argv[i][0] >= '0' && argv[i][0] <= '9')
        return strtol(argv[i], NULL, 10);
    return dflt;
}

static inline int fpscn_flag(int argc, char **argv, const char *flag)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], flag) == 0)
            return 1;
    return 0;
}

#ifdef FPSCN_DRIVER
#include <cuda.h>
/* cuInit, then make device `dev`'s primary context current on this thread. */
static inline CUcontext fpscn_driver_setup(int dev)
{
    CUdevice d;
    CUcontext ctx;
    FPSCN_MUST(cuInit(0));
    FPSCN_MUST(cuDeviceGet(&d, dev));
    FPSCN_MUST(cuDevicePrimaryCtxRetain(&ctx, d));
    FPSCN_MUST(cuCtxSetCurrent(ctx));
    return ctx;
}

static inline void fpscn_meminfo(int dev)
{
    size_t free_b = 0, total_b = 0;
    int rc = cuMemGetInfo_v2(&free_b, &total_b);
    fpscn("meminfo", "cuMemGetInfo_v2", dev, 0, free_b, total_b, rc);
}
#endif

#endif
