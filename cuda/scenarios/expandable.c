/*
 * expandable: PyTorch's expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)
 * through the driver API: one large cuMemAddressReserve (1.125 x device memory, rounded to
 * the granularity), then per 20 MiB page cuMemCreate + cuMemMap + cuMemSetAccess; shrinking
 * does cuMemUnmap + cuMemRelease per page; finally cuMemAddressFree.
 * Usage: expandable [PAGES]   (default 8)
 */
#define FPSCN_DRIVER
#include "fpscn.h"

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    long pages = fpscn_arg(argc, argv, 1, 8);
    fpscn_driver_setup(0);
    fpscn_meminfo(0);

    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    size_t gran = 0;
    FPSCN_MUST(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    size_t total = 0;
    FPSCN_MUST(cuDeviceTotalMem_v2(&total, 0));
    size_t page = 20ull << 20;
    page = (page + gran - 1) / gran * gran;
    size_t reserve = (total + total / 8 + gran - 1) / gran * gran;

    CUdeviceptr va = 0;
    int rc = cuMemAddressReserve(&va, reserve, 0, 0, 0);
    fpscn("reserve", "cuMemAddressReserve", 0, va, reserve, 0, rc);
    if (rc != CUDA_SUCCESS)
        return 1;

    CUmemGenericAllocationHandle *h = calloc((size_t)pages, sizeof *h);
    long mapped = 0;
    for (long i = 0; i < pages; i++) {
        rc = cuMemCreate(&h[i], page, &prop, 0);
        fpscn("create", "cuMemCreate", 0, h[i], page, 0, rc);
        if (rc != CUDA_SUCCESS)
            break;
        CUdeviceptr at = va + (CUdeviceptr)i * page;
        rc = cuMemMap(at, page, 0, h[i], 0);
        fpscn("map", "cuMemMap", 0, at, page, h[i], rc);
        if (rc != CUDA_SUCCESS)
            break;
        CUmemAccessDesc access;
        access.location = prop.location;
        access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        FPSCN_MUST(cuMemSetAccess(at, page, &access, 1));
        mapped++;
    }
    fpscn_meminfo(0);

    /* shrink from the top, as the allocator releases unused pages */
    for (long i = mapped - 1; i >= 0; i--) {
        CUdeviceptr at = va + (CUdeviceptr)i * page;
        rc = cuMemUnmap(at, page);
        fpscn("unmap", "cuMemUnmap", 0, at, page, 0, rc);
        rc = cuMemRelease(h[i]);
        fpscn("release", "cuMemRelease", 0, h[i], page, 0, rc);
    }
    rc = cuMemAddressFree(va, reserve);
    fpscn("addr_free", "cuMemAddressFree", 0, va, reserve, 0, rc);
    fpscn_meminfo(0);
    free(h);
    return 0;
}
