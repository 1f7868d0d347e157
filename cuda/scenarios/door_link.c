/*
 * door_link: the exported-symbol door. Linked with -lcuda; calls cuMemAlloc_v2,
 * cuMemAllocPitch_v2, cuMemFree_v2, cuMemAllocManaged, cuMemGetInfo_v2 and the legacy
 * 32-bit entry points cuMemAlloc, cuMemAllocPitch, cuMemFree and cuMemGetInfo by their ELF
 * names.
 */
#define FPSCN_DRIVER
#include "fpscn.h"

/* cuda.h maps the plain names to _v2; the legacy symbols take 32-bit pointers and sizes. */
#undef cuMemAlloc
#undef cuMemAllocPitch
#undef cuMemFree
#undef cuMemGetInfo
CUresult CUDAAPI cuMemAlloc(unsigned int *dptr, unsigned int bytesize);
CUresult CUDAAPI cuMemAllocPitch(unsigned int *dptr, unsigned int *pPitch, unsigned int WidthInBytes,
                                 unsigned int Height, unsigned int ElementSizeBytes);
CUresult CUDAAPI cuMemFree(unsigned int dptr);
CUresult CUDAAPI cuMemGetInfo(unsigned int *free, unsigned int *total);

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    fpscn_driver_setup(0);
    fpscn_meminfo(0);

    CUdeviceptr a = 0, b = 0, m = 0;
    size_t pitch = 0;
    int rc = cuMemAlloc_v2(&a, 1 << 20);
    fpscn("alloc", "cuMemAlloc_v2", 0, a, 1 << 20, 0, rc);
    rc = cuMemAllocPitch_v2(&b, &pitch, 1000, 64, 4);
    fpscn("alloc", "cuMemAllocPitch_v2", 0, b, 1000ull * 64, pitch, rc);
    rc = cuMemAllocManaged(&m, 4096, CU_MEM_ATTACH_GLOBAL);
    fpscn("managed", "cuMemAllocManaged", 0, m, 4096, CU_MEM_ATTACH_GLOBAL, rc);
    fpscn_meminfo(0);

    unsigned int la = 0, lb = 0, lpitch = 0, lfree = 0, ltotal = 0;
    rc = cuMemAlloc(&la, 4096);
    fpscn("alloc", "cuMemAlloc", 0, la, 4096, 0, rc);
    rc = cuMemAllocPitch(&lb, &lpitch, 100, 10, 8);
    fpscn("alloc", "cuMemAllocPitch", 0, lb, 1000, lpitch, rc);
    rc = cuMemGetInfo(&lfree, &ltotal);
    fpscn("meminfo", "cuMemGetInfo", 0, 0, lfree, ltotal, rc);
    if (la) {
        rc = cuMemFree(la);
        fpscn("free", "cuMemFree", 0, la, 4096, 0, rc);
    }
    if (lb) {
        rc = cuMemFree(lb);
        fpscn("free", "cuMemFree", 0, lb, 1000, 0, rc);
    }

    rc = cuMemFree_v2(a);
    fpscn("free", "cuMemFree_v2", 0, a, 1 << 20, 0, rc);
    rc = cuMemFree_v2(b);
    fpscn("free", "cuMemFree_v2", 0, b, 1000ull * 64, 0, rc);
    rc = cuMemFree_v2(m);
    fpscn("free", "cuMemFree_v2", 0, m, 4096, 0, rc);
    /* freeing twice is an error the probe must see too */
    rc = cuMemFree_v2(a);
    fpscn("free", "cuMemFree_v2", 0, a, 1 << 20, 0, rc);
    fpscn_meminfo(0);
    cuDevicePrimaryCtxRelease_v2(0);
    return 0;
}
