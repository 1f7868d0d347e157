/*
 * door_runtime: the runtime door. Linked with -lcudart only; every allocation goes through
 * libcudart (which reaches the driver through cuGetProcAddress_v2).
 */
#include "fpscn.h"
#include <cuda_runtime_api.h>

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    int count = 0, dev = -1, rv = 0, dv = 0;
    FPSCN_MUST(cudaGetDeviceCount(&count));
    FPSCN_MUST(cudaSetDevice(0));
    FPSCN_MUST(cudaGetDevice(&dev));
    FPSCN_MUST(cudaRuntimeGetVersion(&rv));
    FPSCN_MUST(cudaDriverGetVersion(&dv));

    size_t f = 0, t = 0, pitch = 0;
    int rc = cudaMemGetInfo(&f, &t);
    fpscn("meminfo", "cudaMemGetInfo", dev, 0, f, t, rc);

    void *a = NULL, *b = NULL, *m = NULL, *x = NULL, *y = NULL, *z = NULL;
    rc = cudaMalloc(&a, 2 << 20);
    fpscn("alloc", "cudaMalloc", dev, (unsigned long long)a, 2 << 20, 0, rc);
    rc = cudaMallocPitch(&b, &pitch, 1000, 100);
    fpscn("alloc", "cudaMallocPitch", dev, (unsigned long long)b, 1000 * 100, pitch, rc);
    rc = cudaMallocManaged(&m, 1 << 16, cudaMemAttachGlobal);
    fpscn("managed", "cudaMallocManaged", dev, (unsigned long long)m, 1 << 16, cudaMemAttachGlobal, rc);

    cudaStream_t s = NULL;
    FPSCN_MUST(cudaStreamCreate(&s));
    rc = cudaMallocAsync(&x, 123456, s);
    fpscn("async_alloc", "cudaMallocAsync", dev, (unsigned long long)x, 123456, (unsigned long long)s, rc);
    cudaMemPool_t pool = NULL;
    FPSCN_MUST(cudaDeviceGetDefaultMemPool(&pool, dev));
    rc = cudaMallocFromPoolAsync(&y, 4096, pool, s);
    fpscn("async_alloc", "cudaMallocFromPoolAsync", dev, (unsigned long long)y, 4096, (unsigned long long)pool, rc);
    rc = cudaFreeAsync(x, s);
    fpscn("async_free", "cudaFreeAsync", dev, (unsigned long long)x, 123456, (unsigned long long)s, rc);
    rc = cudaFreeAsync(y, s);
    fpscn("async_free", "cudaFreeAsync", dev, (unsigned long long)y, 4096, (unsigned long long)s, rc);
    FPSCN_MUST(cudaStreamSynchronize(s));
    FPSCN_MUST(cudaMemPoolTrimTo(pool, 0));
    FPSCN_MUST(cudaStreamDestroy(s));

    /* a driver function handed out by the runtime */
    typedef int (*alloc_t)(unsigned long long *, size_t);
    alloc_t drv_alloc = NULL;
    enum cudaDriverEntryPointQueryResult q;
    FPSCN_MUST(cudaGetDriverEntryPoint("cuMemAlloc", (void **)&drv_alloc, cudaEnableDefault, &q));
    unsigned long long d = 0;
    rc = drv_alloc(&d, 777);
    fpscn("alloc", "cuMemAlloc_v2", dev, d, 777, 0, rc);
    z = (void *)d;
    rc = cudaFree(z);
    fpscn("free", "cudaFree", dev, d, 777, 0, rc);

    rc = cudaFree(m);
    fpscn("free", "cudaFree", dev, (unsigned long long)m, 1 << 16, 0, rc);
    rc = cudaFree(b);
    fpscn("free", "cudaFree", dev, (unsigned long long)b, 1000 * 100, 0, rc);
    rc = cudaFree(a);
    fpscn("free", "cudaFree", dev, (unsigned long long)a, 2 << 20, 0, rc);
    /* a failing call: sticky error state */
    void *huge = NULL;
    rc = cudaMalloc(&huge, (size_t)1 << 50);
    fpscn("alloc", "cudaMalloc", dev, (unsigned long long)huge, 1ull << 50, 0, rc);
    if (cudaGetLastError() != cudaErrorMemoryAllocation || cudaGetLastError() != cudaSuccess) {
        fprintf(stderr, "cudaGetLastError did not report and clear the failure\n");
        return 1;
    }
    FPSCN_MUST(cudaDeviceSynchronize());
    rc = cudaMemGetInfo(&f, &t);
    fpscn("meminfo", "cudaMemGetInfo", dev, 0, f, t, rc);
    return 0;
}
