/*
 * door_dlsym: the dlsym door. Not linked with -lcuda: opens libcuda.so.1 with dlopen and
 * finds every function with dlsym, as XLA, older PyTorch and cudarc do.
 */
#include "fpscn.h"
#include <dlfcn.h>

typedef int (*init_t)(unsigned int);
typedef int (*device_get_t)(int *, int);
typedef int (*retain_t)(void **, int);
typedef int (*set_current_t)(void *);
typedef int (*alloc_t)(unsigned long long *, size_t);
typedef int (*free_t)(unsigned long long);
typedef int (*meminfo_t)(size_t *, size_t *);
typedef int (*alloc_async_t)(unsigned long long *, size_t, void *);
typedef int (*free_async_t)(unsigned long long, void *);
typedef int (*sync_t)(void *);

static void *must_sym(void *lib, const char *name)
{
    void *p = dlsym(lib, name);
    if (!p) {
        fprintf(stderr, "dlsym(%s) failed: %s\n", name, dlerror());
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
    init_t init = (init_t)must_sym(lib, "cuInit");
    device_get_t device_get = (device_get_t)must_sym(lib, "cuDeviceGet");
    retain_t retain = (retain_t)must_sym(lib, "cuDevicePrimaryCtxRetain");
    set_current_t set_current = (set_current_t)must_sym(lib, "cuCtxSetCurrent");
    alloc_t alloc = (alloc_t)must_sym(lib, "cuMemAlloc_v2");
    free_t release = (free_t)must_sym(lib, "cuMemFree_v2");
    meminfo_t meminfo = (meminfo_t)must_sym(lib, "cuMemGetInfo_v2");
    alloc_async_t alloc_async = (alloc_async_t)must_sym(lib, "cuMemAllocAsync");
    free_async_t free_async = (free_async_t)must_sym(lib, "cuMemFreeAsync");
    sync_t stream_sync = (sync_t)must_sym(lib, "cuStreamSynchronize");

    int dev = 0;
    void *ctx = NULL;
    FPSCN_MUST(init(0));
    FPSCN_MUST(device_get(&dev, 0));
    FPSCN_MUST(retain(&ctx, dev));
    FPSCN_MUST(set_current(ctx));

    size_t f = 0, t = 0;
    int rc = meminfo(&f, &t);
    fpscn("meminfo", "cuMemGetInfo_v2", 0, 0, f, t, rc);
    unsigned long long a = 0, b = 0;
    rc = alloc(&a, 3 << 20);
    fpscn("alloc", "cuMemAlloc_v2", 0, a, 3 << 20, 0, rc);
    rc = alloc_async(&b, 5000, NULL);
    fpscn("async_alloc", "cuMemAllocAsync", 0, b, 5000, 0, rc);
    rc = free_async(b, NULL);
    fpscn("async_free", "cuMemFreeAsync", 0, b, 5000, 0, rc);
    FPSCN_MUST(stream_sync(NULL));
    rc = release(a);
    fpscn("free", "cuMemFree_v2", 0, a, 3 << 20, 0, rc);
    rc = meminfo(&f, &t);
    fpscn("meminfo", "cuMemGetInfo_v2", 0, 0, f, t, rc);
    return 0;
}
