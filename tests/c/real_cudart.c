/* Loads NVIDIA's own libcudart (path in argv[1], e.g. the PyPI wheel's) and makes the
 * calls every framework's first minutes make: device count and properties, set device,
 * allocations, memory info, frees. Prints one line per call: name and cudaError_t.
 * Exit status 0 when every call returned cudaSuccess. */
#include <dlfcn.h>
#include <stdio.h>
#include <stddef.h>

typedef int (*count_fn)(int *);
typedef int (*set_fn)(int);
typedef int (*malloc_fn)(void **, size_t);
typedef int (*free_fn)(void *);
typedef int (*info_fn)(size_t *, size_t *);
typedef int (*ver_fn)(int *);
typedef const char *(*name_fn)(int);

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: real_cudart LIBCUDART\n");
        return 2;
    }
    void *rt = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!rt) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 2;
    }
    count_fn count = (count_fn)dlsym(rt, "cudaGetDeviceCount");
    set_fn set = (set_fn)dlsym(rt, "cudaSetDevice");
    malloc_fn alloc = (malloc_fn)dlsym(rt, "cudaMalloc");
    free_fn release = (free_fn)dlsym(rt, "cudaFree");
    info_fn info = (info_fn)dlsym(rt, "cudaMemGetInfo");
    ver_fn drv = (ver_fn)dlsym(rt, "cudaDriverGetVersion");
    ver_fn rtv = (ver_fn)dlsym(rt, "cudaRuntimeGetVersion");
    name_fn err = (name_fn)dlsym(rt, "cudaGetErrorName");
    if (!count || !set || !alloc || !release || !info || !drv || !rtv || !err) {
        fprintf(stderr, "missing runtime symbols\n");
        return 2;
    }
    int bad = 0, n = -1, v = 0, r = 0;
#define CALL(what, expr)                                                      \
    do {                                                                      \
        int rc_ = (expr);                                                     \
        printf("%s %d %s\n", what, rc_, err(rc_));                            \
        bad |= rc_ != 0;                                                      \
    } while (0)
    CALL("cudaDriverGetVersion", drv(&v));
    CALL("cudaRuntimeGetVersion", rtv(&r));
    printf("versions driver=%d runtime=%d\n", v, r);
    CALL("cudaGetDeviceCount", count(&n));
    printf("devices %d\n", n);
    CALL("cudaSetDevice", set(0));
    void *a = NULL, *b = NULL;
    CALL("cudaMalloc", alloc(&a, 64 << 20));
    CALL("cudaMalloc", alloc(&b, 1 << 20));
    size_t freeb = 0, total = 0;
    CALL("cudaMemGetInfo", info(&freeb, &total));
    printf("meminfo free=%zu total=%zu a=%p b=%p\n", freeb, total, a, b);
    CALL("cudaFree", release(a));
    CALL("cudaFree", release(b));
    return bad;
}
