/*
 * pools: stream-ordered allocation on the device's default pool and on a created pool:
 * cuMemAllocAsync, cuMemAllocFromPoolAsync, cuMemFreeAsync, then cuMemPoolTrimTo. The pools
 * keep freed memory reserved until trimmed or synchronised (release threshold), which the
 * meminfo lines and the FPSCN-POOL lines (reserved/used current and high, from
 * cuMemPoolGetAttribute) show.
 */
#define FPSCN_DRIVER
#include "fpscn.h"

static void pool_line(const char *name, CUmemoryPool pool)
{
    cuuint64_t rc_ = 0, rh = 0, uc = 0, uh = 0;
    cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &rc_);
    cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &rh);
    cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &uc);
    cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &uh);
    printf("FPSCN-POOL pool=%s reserved=%llu reserved_high=%llu used=%llu used_high=%llu\n", name, rc_, rh, uc, uh);
    fflush(stdout);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    fpscn_driver_setup(0);
    fpscn_meminfo(0);

    CUstream s = NULL;
    FPSCN_MUST(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUmemoryPool dflt = NULL;
    FPSCN_MUST(cuDeviceGetDefaultMemPool(&dflt, 0));
    /* keep freed memory across synchronisation until trimmed */
    cuuint64_t keep = ~0ull;
    FPSCN_MUST(cuMemPoolSetAttribute(dflt, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep));

    CUdeviceptr a = 0, b = 0, c = 0, d = 0;
    int rc = cuMemAllocAsync(&a, 3 << 20, s);
    fpscn("async_alloc", "cuMemAllocAsync", 0, a, 3 << 20, (unsigned long long)s, rc);
    rc = cuMemAllocAsync(&b, 100000, CU_STREAM_PER_THREAD);
    fpscn("async_alloc", "cuMemAllocAsync", 0, b, 100000, (unsigned long long)CU_STREAM_PER_THREAD, rc);
    pool_line("default", dflt);

    CUmemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = 0;
    CUmemoryPool mine = NULL;
    FPSCN_MUST(cuMemPoolCreate(&mine, &props));
    rc = cuMemAllocFromPoolAsync(&c, 5 << 20, mine, s);
    fpscn("async_alloc", "cuMemAllocFromPoolAsync", 0, c, 5 << 20, (unsigned long long)mine, rc);
    rc = cuMemAllocFromPoolAsync(&d, 1 << 20, mine, s);
    fpscn("async_alloc", "cuMemAllocFromPoolAsync", 0, d, 1 << 20, (unsigned long long)mine, rc);
    pool_line("created", mine);
    fpscn_meminfo(0);

    rc = cuMemFreeAsync(a, s);
    fpscn("async_free", "cuMemFreeAsync", 0, a, 3 << 20, (unsigned long long)s, rc);
    rc = cuMemFreeAsync(b, CU_STREAM_PER_THREAD);
    fpscn("async_free", "cuMemFreeAsync", 0, b, 100000, (unsigned long long)CU_STREAM_PER_THREAD, rc);
    rc = cuMemFreeAsync(c, s);
    fpscn("async_free", "cuMemFreeAsync", 0, c, 5 << 20, (unsigned long long)s, rc);
    rc = cuMemFreeAsync(d, s);
    fpscn("async_free", "cuMemFreeAsync", 0, d, 1 << 20, (unsigned long long)s, rc);
    FPSCN_MUST(cuStreamSynchronize(s));
    /* default pool: threshold kept its memory; created pool: threshold 0 released it */
    pool_line("default", dflt);
    pool_line("created", mine);
    fpscn_meminfo(0);

    FPSCN_MUST(cuMemPoolTrimTo(dflt, 0));
    pool_line("default", dflt);
    fpscn_meminfo(0);
    FPSCN_MUST(cuMemPoolDestroy(mine));
    FPSCN_MUST(cuStreamDestroy(s));
    return 0;
}
