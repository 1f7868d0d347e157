/*
 * llama_release: llama.cpp's VMM pool. A large reservation grows by cuMemCreate + cuMemMap
 * + cuMemSetAccess, and each handle is released right after mapping: the memory stays until
 * the pool unmaps its whole range at the end. meminfo lines show free memory unchanged
 * by the releases and restored by the unmap.
 * Usage: llama_release [CHUNKS]   (default 6)
 */
#define FPSCN_DRIVER
#include "fpscn.h"

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    long chunks = fpscn_arg(argc, argv, 1, 6);
    fpscn_driver_setup(0);
    fpscn_meminfo(0);

    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    size_t gran = 0;
    FPSCN_MUST(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    size_t chunk = (32ull << 20) / gran * gran;
    size_t reserve = (size_t)32 << 30; /* llama.cpp reserves 32 GiB of address space */

    CUdeviceptr base = 0;
    int rc = cuMemAddressReserve(&base, reserve, 0, 0, 0);
    fpscn("reserve", "cuMemAddressReserve", 0, base, reserve, 0, rc);
    if (rc != CUDA_SUCCESS)
        return 1;

    size_t size = 0;
    for (long i = 0; i < chunks; i++) {
        CUmemGenericAllocationHandle h = 0;
        rc = cuMemCreate(&h, chunk, &prop, 0);
        fpscn("create", "cuMemCreate", 0, h, chunk, 0, rc);
        if (rc != CUDA_SUCCESS)
            break;
        rc = cuMemMap(base + size, chunk, 0, h, 0);
        fpscn("map", "cuMemMap", 0, base + size, chunk, h, rc);
        /* the handle is no longer needed once mapped */
        int rel = cuMemRelease(h);
        fpscn("release", "cuMemRelease", 0, h, chunk, 0, rel);
        if (rc != CUDA_SUCCESS)
            break;
        CUmemAccessDesc access;
        access.location = prop.location;
        access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        FPSCN_MUST(cuMemSetAccess(base + size, chunk, &access, 1));
        size += chunk;
    }
    fpscn_meminfo(0);

    if (size) {
        rc = cuMemUnmap(base, size);
        fpscn("unmap", "cuMemUnmap", 0, base, size, 0, rc);
    }
    rc = cuMemAddressFree(base, reserve);
    fpscn("addr_free", "cuMemAddressFree", 0, base, reserve, 0, rc);
    fpscn_meminfo(0);
    return 0;
}
