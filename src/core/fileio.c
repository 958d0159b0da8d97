/*
 * fileio.c - atomic file replacement (fileio.h).
 */
#include "core/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/util.h"

char *ddp_file_tmp_path(const char *path)
{
    size_t n = strlen(path) + sizeof ".tmp";
    char *tmp = ddp_malloc(n);
    snprintf(tmp, n, "%s.tmp", path);
    return tmp;
}

/* fsync final's directory, so that the rename is on disk too. Best effort: a file system
 * without directory fsync (some network ones) has nothing more to offer. */
static void sync_dir_of(const char *final)
{
    char *copy = ddp_strdup(final);
    int dfd = open(dirname(copy), O_RDONLY | O_DIRECTORY);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    free(copy);
}

int ddp_file_commit(const char *tmp, const char *final, char *err, size_t errlen)
{
    int fd = open(tmp, O_RDONLY);
    if (fd < 0 || fsync(fd) != 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return ddp_err(err, errlen, "%s: cannot sync: %s", tmp, strerror(e));
    }
    close(fd);
    if (rename(tmp, final) != 0)
        return ddp_err(err, errlen, "cannot rename %s to %s: %s", tmp, final, strerror(errno));
    sync_dir_of(final);
    return 0;
}

FILE *ddp_atomic_open(struct ddp_atomic_file *a, const char *path)
{
    a->tmp = ddp_file_tmp_path(path);
    a->path = ddp_strdup(path);
    a->f = fopen(a->tmp, "w");
    if (!a->f) {
        int e = errno;
        DDP_FREE(a->tmp);
        DDP_FREE(a->path);
        errno = e;
    }
    return a->f;
}

int ddp_atomic_close(struct ddp_atomic_file *a, char *err, size_t errlen)
{
    int ok = fflush(a->f) == 0 && !ferror(a->f);
    int e = errno;
    if (fclose(a->f) != 0 && ok) {
        ok = 0;
        e = errno;
    }
    a->f = NULL;
    int rc = 0;
    if (!ok)
        rc = ddp_err(err, errlen, "%s: cannot write: %s", a->tmp, strerror(e ? e : EIO));
    else if (ddp_file_commit(a->tmp, a->path, err, errlen) != 0)
        rc = -2;
    if (rc != 0)
        unlink(a->tmp);
    DDP_FREE(a->tmp);
    DDP_FREE(a->path);
    return rc;
}

void ddp_atomic_abort(struct ddp_atomic_file *a)
{
    if (a->f)
        fclose(a->f);
    a->f = NULL;
    if (a->tmp)
        unlink(a->tmp);
    DDP_FREE(a->tmp);
    DDP_FREE(a->path);
}
