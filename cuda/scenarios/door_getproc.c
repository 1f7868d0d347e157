/*
 * door_getproc: the cuGetProcAddress door, as NVIDIA's runtime and PyTorch >= 2.8 use it.
 * Finds cuGetProcAddress_v2 (5 arguments, CUDA 12.0) and cuGetProcAddress (4 arguments,
 * CUDA 11.3) with dlsym, then fetches the memory functions through them with flags 0
 * (legacy default stream) and 2 (per-thread default stream: the _ptsz variants). Each
 * line's api= names the driver symbol the returned pointer is.
 */
#include "fpscn.h"
#include <dlfcn.h>

typedef int (*getproc_v2_t)(const char *, void **, int, unsigned long long, int *);
typedef int (*getproc_t)(const char *, void **, int, unsigned long long);
typedef int (*init_t)(unsigned int);
typedef int (*device_get_t)(int *, int);
typedef int (*retain_t)(void **, int);
typedef int (*set_current_t)(void *);
typedef int (*alloc_t)(unsigned long long *, size_t);
typedef int (*pitch_t)(unsigned long long *, size_t *, size_t, size_t, unsigned int);
typedef int (*managed_t)(unsigned long long *, size_t, unsigned int);
typedef int (*free_t)(unsigned long long);
typedef int (*meminfo_t)(size_t *, size_t *);
typedef int (*alloc_async_t)(unsigned long long *, size_t, void *);
typedef int (*free_async_t)(unsigned long long, void *);
typedef int (*sync_t)(void *);

static getproc_v2_t getproc_v2;

static void *fetch(const char *name, int version, unsigned long long flags)
{
    void *p = NULL;
    int status = -1;
    int rc = getproc_v2(name, &p, version, flags, &status);
    if (rc != 0 || status != 0 || !p) {
        fprintf(stderr, "cuGetProcAddress_v2(%s, %d, %llu) failed: rc=%d status=%d\n", name, version, flags, rc, status);
        exit(1);
    }
    return p;
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "dlopen(libcuda.so.1) failed: %s\n", dlerror());
        return 1;
    }
    getproc_v2 = (getproc_v2_t)dlsym(lib, "cuGetProcAddress_v2");
    getproc_t getproc = (getproc_t)dlsym(lib, "cuGetProcAddress");
    if (!getproc_v2 || !getproc) {
        fprintf(stderr, "dlsym(cuGetProcAddress[_v2]) failed\n");
        return 1;
    }

    init_t init = (init_t)fetch("cuInit", 12080, 0);
    device_get_t device_get = (device_get_t)fetch("cuDeviceGet", 12080, 0);
    retain_t retain = (retain_t)fetch("cuDevicePrimaryCtxRetain", 12080, 0);
    set_current_t set_current = (set_current_t)fetch("cuCtxSetCurrent", 12080, 0);
    alloc_t alloc = (alloc_t)fetch("cuMemAlloc", 12080, 0);                   /* cuMemAlloc_v2 */
    free_t release = (free_t)fetch("cuMemFree", 3020, 0);                     /* cuMemFree_v2 */
    meminfo_t meminfo = (meminfo_t)fetch("cuMemGetInfo", 12080, 0);           /* cuMemGetInfo_v2 */
    alloc_async_t alloc_async = (alloc_async_t)fetch("cuMemAllocAsync", 12080, 0);
    alloc_async_t alloc_async_ptsz = (alloc_async_t)fetch("cuMemAllocAsync", 12080, 2);
    free_async_t free_async_ptsz = (free_async_t)fetch("cuMemFreeAsync", 12080, 2);
    free_async_t free_async = (free_async_t)fetch("cuMemFreeAsync", 11020, 0);
    sync_t sync_ptsz = (sync_t)fetch("cuStreamSynchronize", 12080, 2);
    /* the 4-argument form, and the 4-argument form fetched through the 5-argument one */
    pitch_t pitch_alloc = NULL;
    if (getproc("cuMemAllocPitch", (void **)&pitch_alloc, 11030, 0) != 0 || !pitch_alloc) {
        fprintf(stderr, "cuGetProcAddress(cuMemAllocPitch) failed\n");
        return 1;
    }
    getproc_t getproc_again = (getproc_t)fetch("cuGetProcAddress", 11030, 0);
    managed_t managed = NULL;
    if (getproc_again("cuMemAllocManaged", (void **)&managed, 12080, 0) != 0 || !managed) {
        fprintf(stderr, "cuGetProcAddress(cuMemAllocManaged) failed\n");
        return 1;
    }

    int dev = 0;
    void *ctx = NULL;
    FPSCN_MUST(init(0));
    FPSCN_MUST(device_get(&dev, 0));
    FPSCN_MUST(retain(&ctx, dev));
    FPSCN_MUST(set_current(ctx));

    size_t f = 0, t = 0, pitch = 0;
    int rc = meminfo(&f, &t);
    fpscn("meminfo", "cuMemGetInfo_v2", 0, 0, f, t, rc);
    unsigned long long a = 0, b = 0, c = 0, p = 0, m = 0;
    rc = alloc(&a, 1 << 20);
    fpscn("alloc", "cuMemAlloc_v2", 0, a, 1 << 20, 0, rc);
    rc = pitch_alloc(&p, &pitch, 256, 16, 8);
    fpscn("alloc", "cuMemAllocPitch_v2", 0, p, 256 * 16, pitch, rc);
    rc = managed(&m, 8192, 1);
    fpscn("managed", "cuMemAllocManaged", 0, m, 8192, 1, rc);
    rc = alloc_async(&b, 70000, NULL);
    fpscn("async_alloc", "cuMemAllocAsync", 0, b, 70000, 0, rc);
    rc = alloc_async_ptsz(&c, 90000, NULL);
    fpscn("async_alloc", "cuMemAllocAsync_ptsz", 0, c, 90000, 0, rc);
    rc = free_async_ptsz(c, NULL);
    fpscn("async_free", "cuMemFreeAsync_ptsz", 0, c, 90000, 0, rc);
    rc = free_async(b, NULL);
    fpscn("async_free", "cuMemFreeAsync", 0, b, 70000, 0, rc);
    FPSCN_MUST(sync_ptsz(NULL));
    rc = release(m);
    fpscn("free", "cuMemFree_v2", 0, m, 8192, 0, rc);
    rc = release(p);
    fpscn("free", "cuMemFree_v2", 0, p, 256 * 16, 0, rc);
    rc = release(a);
    fpscn("free", "cuMemFree_v2", 0, a, 1 << 20, 0, rc);
    rc = meminfo(&f, &t);
    fpscn("meminfo", "cuMemGetInfo_v2", 0, 0, f, t, rc);
    return 0;
}
