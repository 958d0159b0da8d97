/*
 * fileio.c - atomic file replacement (fileio.h).
 */
#include "core/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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
        unlink(tmp);
        return ddp_err(err, errlen, "%s: cannot sync: %s", tmp, strerror(e));
    }
    close(fd);
    if (rename(tmp, final) != 0) {
        int e = errno;
        unlink(tmp);
        return ddp_err(err, errlen, "cannot rename %s to %s: %s", tmp, final, strerror(e));
    }
    sync_dir_of(final);
    return 0;
}

/* What st is, for a message: "directory", "FIFO", ... */
static const char *kind_of(const struct stat *st)
{
    return S_ISDIR(st->st_mode)    ? "directory"
           : S_ISFIFO(st->st_mode) ? "FIFO"
           : S_ISSOCK(st->st_mode) ? "socket"
           : S_ISCHR(st->st_mode)  ? "character device"
           : S_ISBLK(st->st_mode)  ? "block device"
                                   : "special file";
}

int ddp_file_check_output(const char *opt, const char *path, char *err, size_t errlen)
{
    size_t n = strlen(path);
    if (n == 0)
        return ddp_err(err, errlen, "%s '': an empty path; give a file name", opt);
    if (path[n - 1] == '/')
        return ddp_err(err, errlen, "%s %s: names a directory; give a file name inside it", opt,
                       path);
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return ddp_err(err, errlen, "%s %s: is a %s, not a file it could replace; give a file name",
                       opt, path, kind_of(&st));
    char *copy = ddp_strdup(path);
    const char *dir = dirname(copy);
    int rc = 0;
    if (stat(dir, &st) != 0)
        rc = ddp_err(err, errlen,
                     "%s %s: its directory %s: %s; create it first or give another path", opt, path,
                     dir, strerror(errno));
    else if (!S_ISDIR(st.st_mode))
        rc = ddp_err(err, errlen, "%s %s: %s is a %s, not a directory; give another path", opt,
                     path, dir, kind_of(&st));
    else if (access(dir, W_OK | X_OK) != 0)
        rc = ddp_err(err, errlen, "%s %s: cannot write in directory %s: %s; give another path", opt,
                     path, dir, strerror(errno));
    free(copy);
    return rc;
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

int ddp_file_same(const char *a, const char *b)
{
    struct stat sa, sb;
    return a && b && a[0] && b[0] && stat(a, &sa) == 0 && stat(b, &sb) == 0 &&
           sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}
