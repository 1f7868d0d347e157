/*
 * torch_caching: the segment-level behaviour of PyTorch's native caching allocator, through
 * the runtime. Requests up to 1 MiB share 2 MiB segments, up to 10 MiB share 20 MiB
 * segments, larger ones get their size rounded up to 2 MiB. Freed tensors return to their
 * segment, and segments stay cached (no cudaFree). When cudaMalloc fails with
 * cudaErrorMemoryAllocation the cache is flushed (every segment without live tensors is
 * freed, like torch.cuda.empty_cache) and the request retried once. Run it on a small
 * device, e.g. FRAGPROBE_SIM_GPU=1x1GiB, to see the out-of-memory, the flush and the retry.
 * Usage: torch_caching [MAX_LARGE_TENSORS]   (default 100000: until memory runs out)
 */
#include "fpscn.h"
#include <cuda_runtime_api.h>

#define MIB (1024ull * 1024ull)
#define MAX_SEGS 65536
#define MAX_TENSORS 262144

struct seg {
    void *p;
    size_t size, bump;
    int live, small, freed;
};
static struct seg segs[MAX_SEGS];
static int nsegs;
static int seg_of[MAX_TENSORS];
static char tensor_live[MAX_TENSORS];
static int ntensors;
static int dev;

static int malloc_segment(size_t size, int small)
{
    void *p = NULL;
    int rc = cudaMalloc(&p, size);
    fpscn("alloc", "cudaMalloc", dev, (unsigned long long)p, size, 0, rc);
    if (rc != cudaSuccess) {
        cudaGetLastError(); /* clear the sticky error, as PyTorch does */
        return -1;
    }
    if (nsegs == MAX_SEGS)
        exit(2);
    segs[nsegs] = (struct seg){p, size, 0, 0, small, 0};
    return nsegs++;
}

static void free_segment(int i)
{
    int rc = cudaFree(segs[i].p);
    fpscn("free", "cudaFree", dev, (unsigned long long)segs[i].p, segs[i].size, 0, rc);
    segs[i].freed = 1;
}

/* torch.cuda.empty_cache(): returns every segment without live tensors. */
static int empty_cache(void)
{
    int n = 0;
    for (int i = 0; i < nsegs; i++)
        if (!segs[i].freed && segs[i].live == 0) {
            free_segment(i);
            n++;
        }
    return n;
}

/* Returns the tensor id, or -1 when memory ran out even after flushing the cache. */
static int alloc_tensor(size_t size)
{
    int small = size <= MIB;
    size_t rounded = (size + 511) & ~511ull;
    size_t seg_size = small ? 2 * MIB : size <= 10 * MIB ? 20 * MIB : (size + 2 * MIB - 1) & ~(2 * MIB - 1);
    int s = -1;
    for (int i = 0; i < nsegs && s < 0; i++)
        if (!segs[i].freed && segs[i].small == small && segs[i].size - segs[i].bump >= rounded)
            s = i;
    if (s < 0) {
        s = malloc_segment(seg_size, small);
        if (s < 0) {
            empty_cache();
            s = malloc_segment(seg_size, small);
            if (s < 0)
                return -1;
        }
    }
    segs[s].bump += rounded;
    segs[s].live++;
    if (ntensors == MAX_TENSORS)
        exit(2);
    seg_of[ntensors] = s;
    tensor_live[ntensors] = 1;
    return ntensors++;
}

static void free_tensor(int t)
{
    struct seg *s = &segs[seg_of[t]];
    tensor_live[t] = 0;
    if (--s->live == 0)
        s->bump = 0; /* the whole segment is free again */
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    long max_large = fpscn_arg(argc, argv, 1, 100000);
    FPSCN_MUST(cudaSetDevice(0));
    FPSCN_MUST(cudaGetDevice(&dev));
    size_t f = 0, t = 0;
    int rc = cudaMemGetInfo(&f, &t);
    fpscn("meminfo", "cudaMemGetInfo", dev, 0, f, t, rc);

    /* small tensors: 128 x 256 KiB in 2 MiB segments, then all freed (segments stay cached) */
    int first = ntensors;
    for (int i = 0; i < 128; i++)
        if (alloc_tensor(256 * 1024) < 0)
            break;
    for (int i = first; i < ntensors; i++)
        free_tensor(i);

    /* growth: 6 MiB tensors in 20 MiB segments until memory runs out twice */
    long n = 0;
    while (n < max_large && alloc_tensor(6 * MIB) >= 0)
        n++;
    printf("FPSCN-INFO large_tensors=%ld segments=%d\n", n, nsegs);

    for (int i = 0; i < ntensors; i++)
        if (tensor_live[i])
            free_tensor(i);
    empty_cache();
    rc = cudaMemGetInfo(&f, &t);
    fpscn("meminfo", "cudaMemGetInfo", dev, 0, f, t, rc);
    return 0;
}
