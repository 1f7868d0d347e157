/*
 * leak: allocates and exits without freeing; a real driver returns the memory when the
 * process ends. Usage: leak [--hard] [--hold] [--then-alloc MIB]
 *   --hard  leave with _exit (no exit handlers run)
 *   --hold  after allocating, print "FPSCN-HOLD" and wait until stdin closes (lets another
 *           process inspect the device meanwhile)
 *   --then-alloc MIB  at the end, ask cuMemAlloc_v2 for MIB MiB more (an out-of-memory
 *           error when the device is too full) and free it if it was granted
 * Allocations: 64 MiB with cuMemAlloc_v2, 16 MiB with cuMemAllocAsync, 2 MiB through
 * cuMemCreate (never released).
 */
#define FPSCN_DRIVER
#include "fpscn.h"

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    fpscn_driver_setup(0);
    CUdeviceptr a = 0, b = 0;
    int rc = cuMemAlloc_v2(&a, 64 << 20);
    fpscn("alloc", "cuMemAlloc_v2", 0, a, 64 << 20, 0, rc);
    rc = cuMemAllocAsync(&b, 16 << 20, NULL);
    fpscn("async_alloc", "cuMemAllocAsync", 0, b, 16 << 20, 0, rc);
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    CUmemGenericAllocationHandle h = 0;
    rc = cuMemCreate(&h, 2 << 20, &prop, 0);
    fpscn("create", "cuMemCreate", 0, h, 2 << 20, 0, rc);
    fpscn_meminfo(0);
    if (fpscn_flag(argc, argv, "--hold")) {
        printf("FPSCN-HOLD\n");
        fflush(stdout);
        char buf[256];
        while (fread(buf, 1, sizeof buf, stdin) > 0) {
        }
    }
    for (int i = 1; i + 1 < argc; i++) {
        if (strcmp(argv[i], "--then-alloc") == 0) {
            size_t mib = (size_t)strtol(argv[i + 1], NULL, 10);
            CUdeviceptr c = 0;
            rc = cuMemAlloc_v2(&c, mib << 20);
            fpscn("alloc", "cuMemAlloc_v2", 0, c, mib << 20, 0, rc);
            if (rc == CUDA_SUCCESS) {
                rc = cuMemFree_v2(c);
                fpscn("free", "cuMemFree_v2", 0, c, 0, 0, rc);
            }
        }
    }
    if (fpscn_flag(argc, argv, "--hard"))
        _exit(0);
    return 0;
}
