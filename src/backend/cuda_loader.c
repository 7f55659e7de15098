/* cuda_loader.c — finds, loads and enters the CUDA backend at run time.
 *
 * The core links no CUDA: this file dlopen()s libcinfer_cuda.so (CI_CUDA_LIB) from the
 * directory of the running executable, then from its parent (test binaries live in
 * build/tests/, the library in build/), then from ../lib/cinfer/ beside the executable
 * (`make install`: PREFIX/bin/cinfer, PREFIX/lib/cinfer/libcinfer_cuda.so), then — when
 * this code runs inside the shared libcinfer.so of some other program — from cinfer/
 * beside that library and from its own folder, then by plain name through the dynamic
 * loader's search path; it looks up CI_CUDA_ENTRY and calls it with CI_CUDA_ABI, the device ordinal
 * and a fresh CPU pool the backend keeps (and frees with ci_pool_free in its free()). Every
 * way this can fail (no library, a library that does not load because the toolkit's shared
 * libraries are missing, a stale library, no driver, no device) comes back as NULL with one
 * line in err, so a machine without a GPU runs the CPU engine as before. The library handle
 * stays open for the life of the process (the backend's code lives in it). */
#include "backend.h"
#include "cuda/cuda_api.h"
#include <dlfcn.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The running executable's path into exe and its directory (with the trailing '/') into
 * dir, both PATH_MAX bytes; 0 on success. */
static int exe_dir(char *dir, char *exe) {
    ssize_t len = readlink("/proc/self/exe", exe, PATH_MAX - 1);
    if (len <= 0) return -1;
    exe[len] = 0;
    memcpy(dir, exe, (size_t)len + 1);
    char *slash = strrchr(dir, '/');
    if (!slash) return -1;
    slash[1] = 0;
    return 0;
}

/* Keeps the first dlerror() that is not "file not found" (a library that is there but does
 * not load says more than the absence of the others). */
static void keep_error(char *why, size_t n, const char *msg) {
    if (!msg) return;
    int missing = strstr(msg, "No such file") != NULL;
    if (why[0] && missing) return;
    if (why[0] && !strstr(why, "No such file")) return;
    snprintf(why, n, "%s", msg);
}

/* dir + sub + CI_CUDA_LIB when that file exists: the handle, or NULL (a load error kept in why). */
static void *try_dir(const char *dir, const char *sub, char *why, size_t whylen) {
    char path[PATH_MAX + 96];
    snprintf(path, sizeof path, "%s%s%s", dir, sub, CI_CUDA_LIB);
    if (access(path, F_OK) != 0) return NULL;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) keep_error(why, whylen, dlerror());
    return h;
}

/* exe: PATH_MAX bytes, gets the executable's path (for the message when nothing is found). */
static void *open_library(char *why, size_t whylen, char *exe) {
    char dir[PATH_MAX];
    void *h = NULL;
    why[0] = 0;
    exe[0] = 0;
    if (exe_dir(dir, exe) == 0) {
        if ((h = try_dir(dir, "", why, whylen)) || (h = try_dir(dir, "../lib/cinfer/", why, whylen))) return h;
        /* the parent: strip the last component of dir */
        size_t l = strlen(dir);
        char *s = NULL;
        if (l >= 2) {
            dir[l - 1] = 0;
            s = strrchr(dir, '/');
        }
        if (s) {
            s[1] = 0;
            if ((h = try_dir(dir, "", why, whylen))) return h;
        }
    }
    /* This code inside libcinfer.so: the library's own folder (dladdr names the object that
     * holds this function; in the static cinfer binary that is the executable itself). */
    Dl_info di;
    if (dladdr((void *)(uintptr_t)open_library, &di) && di.dli_fname && realpath(di.dli_fname, dir) &&
        strcmp(dir, exe) != 0) {
        char *s = strrchr(dir, '/');
        s[1] = 0;
        if ((h = try_dir(dir, "cinfer/", why, whylen)) || (h = try_dir(dir, "", why, whylen))) return h;
    }
    h = dlopen(CI_CUDA_LIB, RTLD_NOW | RTLD_LOCAL);
    if (h) return h;
    const char *e = dlerror();
    if (!why[0] && e && !strstr(e, "No such file")) keep_error(why, whylen, e);
    return NULL;
}

ci_backend *ci_backend_cuda_new(int device, int n_threads, char *err, size_t errlen) {
    static void *lib;            /* loaded once, never closed */
    static ci_cuda_entry_fn entry;
    char why[512], exe[PATH_MAX], local[8];
    if (!err || !errlen) { err = local; errlen = sizeof local; }
    err[0] = 0;
    if (!entry) {
        if (!lib) lib = open_library(why, sizeof why, exe);
        if (!lib) {
            if (why[0]) snprintf(err, errlen, "CUDA: %s", why);
            else
                snprintf(err, errlen, "CUDA: %s not found beside %s (built without nvcc?)", CI_CUDA_LIB,
                         exe[0] ? exe : "the executable");
            return NULL;
        }
        dlerror();
        void *sym = dlsym(lib, CI_CUDA_ENTRY);
        const char *e = dlerror();
        if (!sym || e) {
            snprintf(err, errlen, "CUDA: %s", e ? e : CI_CUDA_ENTRY " not found in " CI_CUDA_LIB);
            return NULL;
        }
        /* POSIX guarantees a data pointer from dlsym converts to a function pointer; the
         * memcpy keeps -Wpedantic quiet about it. */
        memcpy(&entry, &sym, sizeof entry);
    }
    ci_pool *pool = ci_pool_new(n_threads);
    if (!pool) {
        snprintf(err, errlen, "CUDA: cannot start the CPU thread pool");
        return NULL;
    }
    char msg[512];
    msg[0] = 0;
    ci_backend *be = entry(CI_CUDA_ABI, device, pool, ci_pool_free, msg, sizeof msg);
    if (!be) {
        ci_pool_free(pool);
        /* the entry's reason, one line, prefixed once */
        char *nl = strchr(msg, '\n');
        if (nl) *nl = 0;
        if (!msg[0]) snprintf(msg, sizeof msg, "no usable device %d", device);
        snprintf(err, errlen, "%s%s", strncmp(msg, "CUDA", 4) == 0 ? "" : "CUDA: ", msg);
        return NULL;
    }
    return be;
}
