/*
 * ctx_switch: one thread moves between devices every way a program can, allocating after
 * each move, so a recorder must attribute every allocation to the device current at that
 * moment: cuCtxSetCurrent between primary contexts, cuCtxPushCurrent/PopCurrent,
 * cuCtxCreate/Destroy (twice, so a new context may take a destroyed one's place),
 * cudaSetDevice with cudaMalloc, and a second thread on the other device meanwhile.
 * Needs two devices (e.g. FRAGPROBE_SIM_GPU=2x4GiB). Usage: ctx_switch [ROUNDS] (default 3).
 */
#define FPSCN_DRIVER
#include "fpscn.h"
#include <cuda_runtime_api.h>
#include <pthread.h>

static CUcontext prim[2];

static void drv_pair(int dev, size_t size)
{
    CUdeviceptr p = 0;
    int rc = cuMemAlloc_v2(&p, size);
    fpscn("alloc", "cuMemAlloc_v2", dev, p, size, 0, rc);
    if (rc == CUDA_SUCCESS) {
        rc = cuMemFree_v2(p);
        fpscn("free", "cuMemFree_v2", dev, p, size, 0, rc);
    }
}

static void rt_pair(int dev, size_t size)
{
    void *p = NULL;
    int rc = cudaMalloc(&p, size);
    fpscn("alloc", "cudaMalloc", dev, (unsigned long long)p, size, 0, rc);
    if (rc == 0) {
        rc = cudaFree(p);
        fpscn("free", "cudaFree", dev, (unsigned long long)p, size, 0, rc);
    }
}

static void *other(void *arg)
{
    long rounds = (long)arg;
    FPSCN_MUST(cuCtxSetCurrent(prim[1]));
    for (long i = 0; i < rounds * 20; i++)
        drv_pair(1, 8192 + (size_t)i * 512);
    return NULL;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    long rounds = fpscn_arg(argc, argv, 1, 3);
    FPSCN_MUST(cuInit(0));
    for (int d = 0; d < 2; d++) {
        CUdevice dev;
        FPSCN_MUST(cuDeviceGet(&dev, d));
        FPSCN_MUST(cuDevicePrimaryCtxRetain(&prim[d], dev));
    }
    pthread_t t;
    if (pthread_create(&t, NULL, other, (void *)rounds) != 0)
        return 1;
    for (long r = 0; r < rounds; r++) {
        size_t size = 4096 + (size_t)r * 1024;
        /* SetCurrent back and forth */
        FPSCN_MUST(cuCtxSetCurrent(prim[0]));
        drv_pair(0, size);
        FPSCN_MUST(cuCtxSetCurrent(prim[1]));
        drv_pair(1, size);
        drv_pair(1, size + 1);
        /* Push the other device's context, pop back */
        FPSCN_MUST(cuCtxPushCurrent(prim[0]));
        drv_pair(0, size);
        CUcontext popped;
        FPSCN_MUST(cuCtxPopCurrent(&popped));
        drv_pair(1, size);
        /* A created context, destroyed, then another on the other device */
        for (int d = 0; d < 2; d++) {
            CUcontext c;
            FPSCN_MUST(cuCtxCreate(&c, 0, d));
            drv_pair(d, size);
            FPSCN_MUST(cuCtxDestroy(c));
        }
        /* The runtime's notion of the device */
        for (int d = 1; d >= 0; d--) {
            FPSCN_MUST(cudaSetDevice(d));
            rt_pair(d, size);
            drv_pair(d, size);
        }
    }
    pthread_join(t, NULL);
    return 0;
}
