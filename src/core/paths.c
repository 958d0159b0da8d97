/*
 * paths.c - the data directory of the running executable (see paths.h). meson passes the
 * places as ddp_build.h defines: DDP_SOURCE_ROOT and DDP_BUILD_ROOT (the build tree),
 * DDP_DATADIR (PREFIX/share/ddptrain as configured) and DDP_DATADIR_FROM_BINDIR (the same,
 * relative to the bindir: "../share/ddptrain"; empty where bindir or datadir is absolute).
 */
#include "core/paths.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ddp_build.h"

static int is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The directory of the running executable, symlinks resolved, into dir; 0 or -1. */
static int exe_dir(char *dir, size_t len)
{
    char *real = realpath("/proc/self/exe", NULL);
    if (!real)
        return -1;
    char *slash = strrchr(real, '/');
    if (slash)
        *slash = '\0';
    int rc = snprintf(dir, len, "%s", real[0] ? real : "/") < (int)len ? 0 : -1;
    free(real);
    return rc;
}

/* Whether path is dir itself or lies under it. */
static int under(const char *path, const char *dir)
{
    size_t n = strlen(dir);
    return n && strncmp(path, dir, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

/* realpath of p into out when it is a directory; 1, else 0. */
static int take_dir(const char *p, char *out, size_t len)
{
    if (!is_dir(p))
        return 0;
    char *real = realpath(p, NULL);
    snprintf(out, len, "%s", real ? real : p);
    free(real);
    return 1;
}

int ddp_paths_data_dir(char *dir, size_t len, const char **origin)
{
    char exe[PATH_MAX] = "", rel[PATH_MAX + 64] = "";
    const char *none = "none";
    if (!origin)
        origin = &none;
    if (exe_dir(exe, sizeof exe) == 0 && DDP_DATADIR_FROM_BINDIR[0]) {
        snprintf(rel, sizeof rel, "%s/%s", exe, DDP_DATADIR_FROM_BINDIR);
        if (take_dir(rel, dir, len)) {
            *origin = "installed";
            return 1;
        }
    }
    /* the build tree's programs (ddptrain, tests/...) use the source tree's files */
    char build[PATH_MAX];
    if (exe[0] && realpath(DDP_BUILD_ROOT, build) && under(exe, build) &&
        take_dir(DDP_SOURCE_ROOT, dir, len)) {
        *origin = "build tree";
        return 1;
    }
    if (take_dir(DDP_DATADIR, dir, len)) {
        *origin = "installed";
        return 1;
    }
    *origin = "none";
    if (rel[0])
        snprintf(dir, len, "%s nor %s", rel, DDP_DATADIR);
    else
        snprintf(dir, len, "%s", DDP_DATADIR);
    return 0;
}

int ddp_paths_find(const char *rel, char *path, size_t len)
{
    char dir[PATH_MAX * 2 + 8];
    if (!ddp_paths_data_dir(dir, sizeof dir, NULL)) {
        snprintf(path, len, "%s (no data directory: %s)", rel, dir);
        return 0;
    }
    snprintf(path, len, "%s/%s", dir, rel);
    struct stat st;
    return stat(path, &st) == 0;
}
