/*
 * exec: allocates (and keeps) 7 MiB, then replaces itself with another program. A real
 * driver gives the memory back when the image is replaced; the new image (same pid) starts
 * without it.
 * Usage: exec PROGRAM [ARGS...]   run PROGRAM after the allocation
 *        exec                     re-run this program, which then allocates 3 MiB, frees it
 *                                 and prints its meminfo
 */
#define FPSCN_DRIVER
#include "fpscn.h"

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    fpscn_driver_setup(0);
    CUdeviceptr p = 0;
    if (fpscn_flag(argc, argv, "--after-exec")) {
        fpscn_meminfo(0);
        int rc = cuMemAlloc_v2(&p, 3 << 20);
        fpscn("alloc", "cuMemAlloc_v2", 0, p, 3 << 20, 0, rc);
        rc = cuMemFree_v2(p);
        fpscn("free", "cuMemFree_v2", 0, p, 3 << 20, 0, rc);
        return 0;
    }
    int rc = cuMemAlloc_v2(&p, 7 << 20);
    fpscn("alloc", "cuMemAlloc_v2", 0, p, 7 << 20, 0, rc);
    fpscn_meminfo(0);
    fflush(stdout);
    if (argc > 1) {
        execv(argv[1], argv + 1);
    } else {
        char *again[] = {argv[0], "--after-exec", NULL};
        execv("/proc/self/exe", again);
    }
    perror("execv");
    return 1;
}
