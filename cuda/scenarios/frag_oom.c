/*
 * frag_oom: out of memory from fragmentation. Allocates blocks of 1/32 of the device until
 * an allocation fails, frees every other block, then asks for all the free memory that
 * cuMemGetInfo reports (rounded down to 2 MiB): the meminfo line before it shows the total
 * free memory suffices, but it is scattered over holes of one or two blocks, so the
 * simulated driver answers CUDA_ERROR_OUT_OF_MEMORY (res=2). (A real driver may succeed: it
 * can back contiguous addresses with scattered physical pages.)
 * Usage: frag_oom [MAX_BLOCKS]   (default 64)
 */
#define FPSCN_DRIVER
#include "fpscn.h"

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    long max_blocks = fpscn_arg(argc, argv, 1, 64);
    fpscn_driver_setup(0);
    size_t free_b = 0, total_b = 0;
    FPSCN_MUST(cuMemGetInfo_v2(&free_b, &total_b));
    fpscn("meminfo", "cuMemGetInfo_v2", 0, 0, free_b, total_b, 0);
    size_t block = total_b / 32 / (2u << 20) * (2u << 20);
    if (block == 0)
        block = 2u << 20;

    CUdeviceptr *p = calloc((size_t)max_blocks, sizeof *p);
    long n = 0;
    while (n < max_blocks) {
        int rc = cuMemAlloc_v2(&p[n], block);
        fpscn("alloc", "cuMemAlloc_v2", 0, p[n], block, 0, rc);
        if (rc != CUDA_SUCCESS)
            break;
        n++;
    }
    for (long i = 0; i < n; i += 2) {
        int rc = cuMemFree_v2(p[i]);
        fpscn("free", "cuMemFree_v2", 0, p[i], block, 0, rc);
        p[i] = 0;
    }
    FPSCN_MUST(cuMemGetInfo_v2(&free_b, &total_b));
    fpscn("meminfo", "cuMemGetInfo_v2", 0, 0, free_b, total_b, 0);
    CUdeviceptr big = 0;
    size_t want = free_b / (2u << 20) * (2u << 20);
    int rc = cuMemAlloc_v2(&big, want);
    fpscn("alloc", "cuMemAlloc_v2", 0, big, want, 0, rc);
    if (rc == CUDA_SUCCESS) {
        rc = cuMemFree_v2(big);
        fpscn("free", "cuMemFree_v2", 0, big, want, 0, rc);
    }
    for (long i = 1; i < n; i += 2) {
        rc = cuMemFree_v2(p[i]);
        fpscn("free", "cuMemFree_v2", 0, p[i], block, 0, rc);
    }
    free(p);
    return 0;
}
