/*
 * fork: allocations in a parent and a child. The process forks before touching CUDA, then
 * both initialise and allocate (CUDA does not survive fork: a child may only use it if the
 * parent had not initialised it). Finally the parent, now initialised, forks once more and
 * that child tries one allocation without initialising, which fails as on a real driver
 * (CUDA_ERROR_NOT_INITIALIZED); its line shows the code.
 */
#define FPSCN_DRIVER
#include "fpscn.h"
#include <sys/wait.h>

static void work(const char *who, size_t size)
{
    fpscn_driver_setup(0);
    CUdeviceptr p = 0;
    int rc = cuMemAlloc_v2(&p, size);
    fpscn("alloc", "cuMemAlloc_v2", 0, p, size, 0, rc);
    fpscn_meminfo(0);
    if (rc == CUDA_SUCCESS) {
        rc = cuMemFree_v2(p);
        fpscn("free", "cuMemFree_v2", 0, p, size, 0, rc);
    }
    (void)who;
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    fflush(stdout);
    pid_t child = fork();
    if (child < 0)
        return 1;
    if (child == 0) {
        work("child", 3 << 20);
        return 0;
    }
    work("parent", 5 << 20);
    int status = 0;
    waitpid(child, &status, 0);

    CUdeviceptr keep = 0;
    int rc = cuMemAlloc_v2(&keep, 1 << 20);
    fpscn("alloc", "cuMemAlloc_v2", 0, keep, 1 << 20, 0, rc);
    fflush(stdout);
    pid_t late = fork();
    if (late == 0) {
        CUdeviceptr p = 0;
        rc = cuMemAlloc_v2(&p, 4096);
        fpscn("alloc", "cuMemAlloc_v2", 0, p, 4096, 0, rc);
        _exit(0);
    }
    waitpid(late, &status, 0);
    rc = cuMemFree_v2(keep);
    fpscn("free", "cuMemFree_v2", 0, keep, 1 << 20, 0, rc);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
