/*
 * getproc_list: replays a list of cuGetProcAddress_v2 requests ("name, ver=N, flags=F" per
 * line, as the real cudart 12.8 makes them at start-up) through the driver found with
 * dlopen + dlsym, and prints one line per request:
 *   GETPROC <name> <ver> <flags> res=<CUresult> status=<symbol status> found=<0|1> probe=<0|1>
 * probe=1 when the returned pointer lies inside libfragprobe.so (a wrapper was handed out).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

typedef int (*getproc_v2)(const char *, void **, int, unsigned long long, int *);

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 1;
    }
    getproc_v2 gp = (getproc_v2)dlsym(h, "cuGetProcAddress_v2");
    if (!gp)
        return 1;
    FILE *f = fopen(argv[1], "r");
    if (!f)
        return 1;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        char name[256] = "";
        int ver = 0;
        unsigned long long flags = 0;
        char *comma = strchr(line, ',');
        if (!comma)
            continue;
        size_t n = (size_t)(comma - line);
        if (n >= sizeof name)
            continue;
        memcpy(name, line, n);
        name[n] = 0;
        if (sscanf(comma, ", ver=%d, flags=%llu", &ver, &flags) != 2)
            continue;
        void *p = NULL;
        int status = -1;
        int res = gp(name, &p, ver, flags, &status);
        int probe = 0;
        Dl_info info;
        if (p && dladdr(p, &info) && info.dli_fname && strstr(info.dli_fname, "libfragprobe"))
            probe = 1;
        printf("GETPROC %s %d %llu res=%d status=%d found=%d probe=%d\n", name[0] ? name : "<empty>", ver, flags, res,
               status, p != NULL, probe);
    }
    return 0;
}
