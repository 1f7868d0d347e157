/*
 * threads16: 16 threads, each making N cuMemAlloc_v2/cuMemFree_v2 pairs of varied sizes on
 * the primary context. Usage: threads16 [N] [--quiet]   (N default 1000). With --quiet only
 * the summary line is printed: FPSCN-SUMMARY allocs=<ok allocs> frees=<ok frees>.
 */
#define FPSCN_DRIVER
#include "fpscn.h"
#include <pthread.h>

#define THREADS 16
static long pairs;
static int quiet;
static CUcontext ctx;
static long ok_allocs[THREADS], ok_frees[THREADS];

static void *worker(void *arg)
{
    long id = (long)arg;
    FPSCN_MUST(cuCtxSetCurrent(ctx));
    unsigned long long x = (unsigned long long)id * 2654435761ull + 1;
    for (long i = 0; i < pairs; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        size_t size = 256 + (size_t)((x >> 33) % (1 << 20));
        CUdeviceptr p = 0;
        int rc = cuMemAlloc_v2(&p, size);
        if (!quiet)
            fpscn("alloc", "cuMemAlloc_v2", 0, p, size, 0, rc);
        if (rc != CUDA_SUCCESS)
            continue;
        ok_allocs[id]++;
        rc = cuMemFree_v2(p);
        if (!quiet)
            fpscn("free", "cuMemFree_v2", 0, p, size, 0, rc);
        if (rc == CUDA_SUCCESS)
            ok_frees[id]++;
    }
    return NULL;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    pairs = fpscn_arg(argc, argv, 1, 1000);
    quiet = fpscn_flag(argc, argv, "--quiet");
    ctx = fpscn_driver_setup(0);
    pthread_t t[THREADS];
    for (long i = 0; i < THREADS; i++)
        if (pthread_create(&t[i], NULL, worker, (void *)i) != 0)
            return 1;
    long allocs = 0, frees = 0;
    for (long i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        allocs += ok_allocs[i];
        frees += ok_frees[i];
    }
    printf("FPSCN-SUMMARY allocs=%ld frees=%ld\n", allocs, frees);
    return 0;
}
