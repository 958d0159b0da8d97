/*
 * npy.c - .npy header parser, .npz (zip) directory reader and the streaming array reader of
 * npy.h. Headers and directories are parsed from private copies with every size bounded
 * and checked against the file's length before anything of the array's size is allocated.
 */
#include "data/npy.h"

#include "core/util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

/* Compressed bytes read from the file per inflate step. */
#define NPZ_INFLATE_CHUNK ((size_t)256 << 10)
/* The end-of-directory record is in the last 22 + 65535 (comment) bytes of a zip. */
#define ZIP_EOCD_SEARCH (22 + 65535)
#define ZIP_MAX_NAME 4096

struct ddp_npy {
    char *name;
    FILE *f;
    char descr[16];
    char kind;
    int itemsize, rank;
    int64_t shape[DDP_NPY_MAX_RANK];
    uint64_t left;  /* data bytes not yet handed out */
    uint64_t zleft; /* deflated: compressed bytes not yet read from the file */
    int deflated;   /* member compressed with deflate */
    int zinit;      /* z initialised */
    z_stream z;
    unsigned char *zbuf;
    int is_member; /* CRC-32 and size from the zip directory */
    uint32_t crc, want_crc;
};

typedef struct {
    char *name;
    int method, flags;
    uint32_t crc;
    uint64_t csize, usize, offset;
} npz_entry;

struct ddp_npz {
    char *path;
    uint64_t file_size, cd_offset;
    npz_entry *e;
    int64_t n;
    char *keys;
};

static uint16_t le16(const unsigned char *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}
static uint32_t le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t le64(const unsigned char *p)
{
    return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32;
}

/* Open path as a regular file; its size into *size. NULL with err naming it. */
static FILE *open_regular(const char *path, uint64_t *size, char *err, size_t errlen)
{
    const char *kind = NULL;
    int fd = ddp_open_regular(path, &kind);
    if (fd < 0) {
        ddp_err(err, errlen, "%s: cannot open: %s; give a regular file", path,
                kind ? kind : strerror(errno));
        return NULL;
    }
    struct stat st;
    FILE *f = fstat(fd, &st) == 0 ? fdopen(fd, "rb") : NULL;
    if (!f) {
        ddp_err(err, errlen, "%s: cannot read: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    *size = (uint64_t)st.st_size;
    return f;
}

/* Raw bytes from the array's source: the file, or the member inflated. Returns bytes got
 * (< n only at the end of the source) or -1 on corrupt deflate data. */
static int64_t src_read(ddp_npy *a, unsigned char *buf, size_t n)
{
    if (!a->deflated)
        return (int64_t)fread(buf, 1, n, a->f);
    a->z.next_out = buf;
    a->z.avail_out = (uInt)n;
    while (a->z.avail_out > 0) {
        if (a->z.avail_in == 0 && a->zleft > 0) {
            size_t want = a->zleft < NPZ_INFLATE_CHUNK ? (size_t)a->zleft : NPZ_INFLATE_CHUNK;
            size_t got = fread(a->zbuf, 1, want, a->f);
            if (got == 0)
                break;
            a->zleft -= got;
            a->z.next_in = a->zbuf;
            a->z.avail_in = (uInt)got;
        }
        int r = inflate(&a->z, Z_NO_FLUSH);
        if (r == Z_STREAM_END)
            break;
        if (r != Z_OK && !(r == Z_BUF_ERROR && a->z.avail_in == 0 && a->zleft == 0))
            return -1;
        if (r == Z_BUF_ERROR)
            break;
    }
    return (int64_t)(n - a->z.avail_out);
}

/* Read exactly n header bytes or fail naming the file as truncated. */
static int read_exact(ddp_npy *a, void *buf, size_t n, const char *what, char *err, size_t errlen)
{
    int64_t got = src_read(a, buf, n);
    if (got == (int64_t)n) {
        if (a->is_member) /* the member's CRC-32 covers the header too */
            a->crc = (uint32_t)crc32(a->crc, buf, (uInt)n);
        return 0;
    }
    return ddp_err(err, errlen,
                   "%s: %s (%s); the file is not a complete .npy, write it again "
                   "with numpy.save",
                   a->name, got < 0 ? "corrupt deflate data" : "truncated", what);
}

/* Skip blanks in the header text. */
static const char *skip_ws(const char *p)
{
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
        p++;
    return p;
}

/* A quoted Python string ('...' or "...") without escapes into out; NULL when malformed. */
static const char *parse_str(const char *p, char *out, size_t len)
{
    char q = *p;
    if (q != '\'' && q != '"')
        return NULL;
    const char *e = strchr(p + 1, q);
    if (!e || (size_t)(e - p - 1) >= len || memchr(p + 1, '\\', (size_t)(e - p - 1)))
        return NULL;
    snprintf(out, len, "%.*s", (int)(e - p - 1), p + 1);
    return e + 1;
}

/* A shape tuple "(a, b, c)" / "(a,)" / "()" into a->shape; NULL when malformed. */
static const char *parse_shape(ddp_npy *a, const char *p, char *err, size_t errlen)
{
    if (*p != '(')
        return NULL;
    p = skip_ws(p + 1);
    a->rank = 0;
    while (*p != ')') {
        if (*p < '0' || *p > '9')
            return NULL;
        int64_t v = 0;
        for (; *p >= '0' && *p <= '9'; p++) {
            if (v > (INT64_MAX - 9) / 10) {
                ddp_err(err, errlen,
                        "%s: a dimension of the shape overflows 64 bits; the "
                        "header is corrupt",
                        a->name);
                return NULL;
            }
            v = v * 10 + (*p - '0');
        }
        if (a->rank == DDP_NPY_MAX_RANK) {
            ddp_err(err, errlen,
                    "%s: shape has more than %d dimensions; expected (N, H, W), "
                    "(N, C, H, W), (N, D) or (N,)",
                    a->name, DDP_NPY_MAX_RANK);
            return NULL;
        }
        a->shape[a->rank++] = v;
        p = skip_ws(p);
        if (*p == ',')
            p = skip_ws(p + 1);
        else if (*p != ')')
            return NULL;
    }
    return p + 1;
}

/* descr: little-endian (or byte-order-free) bool, int, uint or float of 1..8 bytes. */
static int check_descr(ddp_npy *a, char *err, size_t errlen)
{
    const char *d = a->descr;
    char order = d[0];
    if (order == '<' || order == '|' || order == '=')
        d++;
    else if (order == '>')
        return ddp_err(err, errlen,
                       "%s: dtype '%s' is big-endian; convert it with "
                       "a.astype(a.dtype.newbyteorder('<')) and save again",
                       a->name, a->descr);
    char *end = NULL;
    long sz = (d[0] && strchr("biuf", d[0])) ? strtol(d + 1, &end, 10) : 0;
    if (!end || *end || (sz != 1 && sz != 2 && sz != 4 && sz != 8))
        return ddp_err(err, errlen,
                       "%s: dtype '%s' is not a plain number type; expected "
                       "uint8 or float32 images and integer labels",
                       a->name, a->descr);
    a->kind = d[0];
    a->itemsize = (int)sz;
    return 0;
}

/* Parse the header dict {'descr': .., 'fortran_order': .., 'shape': (..), } (any order). */
static int parse_dict(ddp_npy *a, const char *h, char *err, size_t errlen)
{
    int seen = 0, fortran = 0;
    const char *p = skip_ws(h);
    if (*p++ != '{')
        goto bad;
    for (p = skip_ws(p); *p != '}'; p = skip_ws(p)) {
        char key[32];
        if (!(p = parse_str(p, key, sizeof key)) || *(p = skip_ws(p)) != ':')
            goto bad;
        p = skip_ws(p + 1);
        if (!strcmp(key, "descr") && !(seen & 1)) {
            if (!(p = parse_str(p, a->descr, sizeof a->descr)))
                return ddp_err(err, errlen,
                               "%s: 'descr' is not a simple dtype string; "
                               "structured and object arrays are not images",
                               a->name);
            seen |= 1;
        } else if (!strcmp(key, "fortran_order") && !(seen & 2)) {
            if (!strncmp(p, "False", 5))
                p += 5;
            else if (!strncmp(p, "True", 4))
                p += 4, fortran = 1;
            else
                goto bad;
            seen |= 2;
        } else if (!strcmp(key, "shape") && !(seen & 4)) {
            if (!(p = parse_shape(a, p, err, errlen)))
                return err && *err ? -1
                                   : ddp_err(err, errlen,
                                             "%s: 'shape' is not a tuple of "
                                             "integers; the header is corrupt",
                                             a->name);
            seen |= 4;
        } else {
            return ddp_err(err, errlen,
                           "%s: header key '%s' is unknown or repeated; expected "
                           "exactly 'descr', 'fortran_order' and 'shape'",
                           a->name, key);
        }
        p = skip_ws(p);
        if (*p == ',')
            p++;
        else if (*p != '}')
            goto bad;
    }
    if (seen != 7)
        return ddp_err(err, errlen,
                       "%s: header lacks '%s'; expected 'descr', 'fortran_order' "
                       "and 'shape'",
                       a->name,
                       !(seen & 1)   ? "descr"
                       : !(seen & 2) ? "fortran_order"
                                     : "shape");
    if (fortran)
        return ddp_err(err, errlen,
                       "%s: array is in Fortran order; save it in C order "
                       "(numpy.save(f, numpy.ascontiguousarray(a)))",
                       a->name);
    if (*skip_ws(p + 1))
        goto bad;
    return check_descr(a, err, errlen);
bad:
    return ddp_err(err, errlen,
                   "%s: the header is not the dict numpy writes ({'descr': ..., "
                   "'fortran_order': ..., 'shape': (...)}); write the file with numpy.save",
                   a->name);
}

/* Magic, version and header of the array's source; then the data size against `avail`
 * (the bytes after the header). */
static int read_header(ddp_npy *a, uint64_t total, char *err, size_t errlen)
{
    unsigned char m[12];
    if (read_exact(a, m, 10, "no .npy header", err, errlen) != 0)
        return -1;
    if (memcmp(m, "\x93NUMPY", 6) != 0)
        return ddp_err(err, errlen,
                       "%s: not a .npy file (no \\x93NUMPY magic); write it with "
                       "numpy.save",
                       a->name);
    if ((m[6] != 1 && m[6] != 2 && m[6] != 3) || m[7] != 0)
        return ddp_err(err, errlen, "%s: .npy format version %d.%d; expected 1.0, 2.0 or 3.0",
                       a->name, m[6], m[7]);
    uint64_t pre = m[6] == 1 ? 10 : 12;
    if (m[6] != 1 && read_exact(a, m + 10, 2, "header length", err, errlen) != 0)
        return -1;
    uint32_t hlen = m[6] == 1 ? le16(m + 8) : le32(m + 8);
    if (hlen > DDP_NPY_MAX_HEADER || pre + hlen > total)
        return ddp_err(err, errlen,
                       "%s: header length %u is beyond the file (%llu bytes) or "
                       "above %u; the file is truncated or corrupt",
                       a->name, hlen, (unsigned long long)total, DDP_NPY_MAX_HEADER);
    char *h = ddp_malloc((size_t)hlen + 1);
    int rc = read_exact(a, h, hlen, "header", err, errlen);
    h[hlen] = '\0';
    if (rc == 0 && strlen(h) != hlen)
        rc = ddp_err(err, errlen, "%s: the header holds a NUL byte; the file is corrupt", a->name);
    if (rc == 0)
        rc = parse_dict(a, h, err, errlen);
    free(h);
    if (rc != 0)
        return -1;
    uint64_t bytes = (uint64_t)a->itemsize;
    for (int i = 0; i < a->rank; i++) {
        if (a->shape[i] != 0 && bytes > UINT64_MAX / (uint64_t)a->shape[i])
            bytes = UINT64_MAX;
        else
            bytes *= (uint64_t)a->shape[i];
    }
    uint64_t avail = total - pre - hlen;
    if (bytes != avail)
        return ddp_err(err, errlen,
                       "%s: the shape promises %s%llu data bytes but the file holds "
                       "%llu; the file is %s, write it again",
                       a->name, bytes == UINT64_MAX ? "over " : "", (unsigned long long)bytes,
                       (unsigned long long)avail,
                       bytes > avail ? "truncated" : "corrupt (trailing data)");
    a->left = bytes;
    return 0;
}

ddp_npy *ddp_npy_open(const char *path, char *err, size_t errlen)
{
    ddp_npy *a = ddp_calloc(1, sizeof *a);
    a->name = ddp_strdup(path);
    uint64_t size = 0;
    if (!(a->f = open_regular(path, &size, err, errlen)) || read_header(a, size, err, errlen))
        goto fail;
    return a;
fail:
    ddp_npy_close(a);
    return NULL;
}

int ddp_npy_read(ddp_npy *a, void *buf, size_t bytes, char *err, size_t errlen)
{
    if (bytes > a->left)
        return ddp_err(err, errlen, "%s: read past the end of the array", a->name);
    int64_t got = src_read(a, buf, bytes);
    if (got != (int64_t)bytes)
        return ddp_err(err, errlen, "%s: %s; the file is incomplete, write it again", a->name,
                       got < 0 ? "corrupt deflate data" : "data ends early (truncated)");
    if (a->is_member)
        a->crc = (uint32_t)crc32(a->crc, buf, (uInt)bytes);
    a->left -= bytes;
    /* The last piece: check the CRC before the caller commits anything made of the data. */
    return a->left == 0 ? ddp_npy_finish(a, err, errlen) : 0;
}

int ddp_npy_finish(ddp_npy *a, char *err, size_t errlen)
{
    if (a->left)
        return ddp_err(err, errlen, "%s: %llu data bytes left unread", a->name,
                       (unsigned long long)a->left);
    if (a->is_member && a->crc != a->want_crc)
        return ddp_err(err, errlen,
                       "%s: CRC-32 mismatch (%08x, the archive says %08x); the "
                       "archive is corrupt, write it again",
                       a->name, a->crc, a->want_crc);
    return 0;
}

void ddp_npy_close(ddp_npy *a)
{
    if (!a)
        return;
    if (a->zinit)
        inflateEnd(&a->z);
    if (a->f)
        fclose(a->f);
    free(a->zbuf);
    free(a->name);
    free(a);
}

const char *ddp_npy_name(const ddp_npy *a)
{
    return a->name;
}
const char *ddp_npy_descr(const ddp_npy *a)
{
    return a->descr;
}
char ddp_npy_kind(const ddp_npy *a)
{
    return a->kind;
}
int ddp_npy_itemsize(const ddp_npy *a)
{
    return a->itemsize;
}
int ddp_npy_rank(const ddp_npy *a)
{
    return a->rank;
}
const int64_t *ddp_npy_shape(const ddp_npy *a)
{
    return a->shape;
}

/* The zip64 extra field of a directory entry: the fields whose 32-bit value is all ones. */
static int zip64_extra(npz_entry *e, const unsigned char *x, size_t n, int need_u, int need_c,
                       int need_o)
{
    while (n >= 4) {
        uint16_t id = le16(x), len = le16(x + 2);
        if ((size_t)len + 4 > n)
            return -1;
        if (id == 0x0001) {
            const unsigned char *q = x + 4;
            size_t have = len;
            uint64_t *dst[3] = {need_u ? &e->usize : NULL, need_c ? &e->csize : NULL,
                                need_o ? &e->offset : NULL};
            for (int k = 0; k < 3; k++) {
                if (!dst[k])
                    continue;
                if (have < 8)
                    return -1;
                *dst[k] = le64(q);
                q += 8;
                have -= 8;
            }
            return 0;
        }
        x += 4 + len;
        n -= 4 + (size_t)len;
    }
    return need_u || need_c || need_o ? -1 : 0;
}

/* Locate the central directory: offset, size and entry count (zip64 when marked). */
static int find_directory(FILE *f, const char *path, uint64_t size, uint64_t *off, uint64_t *len,
                          uint64_t *count, char *err, size_t errlen)
{
    size_t tail = size < ZIP_EOCD_SEARCH ? (size_t)size : ZIP_EOCD_SEARCH;
    unsigned char *b = ddp_malloc(tail + 1);
    int rc = -1;
    if (tail < 22 || fseeko(f, (off_t)(size - tail), SEEK_SET) != 0 || fread(b, 1, tail, f) != tail)
        goto bad;
    size_t i = tail - 22 + 1;
    while (i-- > 0)
        if (le32(b + i) == 0x06054b50)
            break;
    if (i == (size_t)-1)
        goto bad;
    *count = le16(b + i + 10);
    *len = le32(b + i + 12);
    *off = le32(b + i + 16);
    if (*count == 0xFFFF || *len == 0xFFFFFFFF || *off == 0xFFFFFFFF) {
        unsigned char l[20], e[56];
        uint64_t eocd = size - tail + i;
        if (eocd < 20 || fseeko(f, (off_t)(eocd - 20), SEEK_SET) != 0 || fread(l, 1, 20, f) != 20 ||
            le32(l) != 0x07064b50 || le64(l + 8) > size - 56 ||
            fseeko(f, (off_t)le64(l + 8), SEEK_SET) != 0 || fread(e, 1, 56, f) != 56 ||
            le32(e) != 0x06064b50)
            goto bad;
        *count = le64(e + 32);
        *len = le64(e + 40);
        *off = le64(e + 48);
    }
    if (*len > DDP_NPZ_MAX_DIRECTORY || *off > size || *len > size - *off || *count > *len / 46) {
        rc = ddp_err(err, errlen,
                     "%s: the zip directory (%llu entries, %llu bytes at %llu) "
                     "lies outside the file or above %llu bytes; the archive is corrupt",
                     path, (unsigned long long)*count, (unsigned long long)*len,
                     (unsigned long long)*off, (unsigned long long)DDP_NPZ_MAX_DIRECTORY);
        goto out;
    }
    rc = 0;
    goto out;
bad:
    rc = ddp_err(err, errlen,
                 "%s: not a complete zip archive (no end-of-directory record); "
                 "write it with numpy.savez or numpy.savez_compressed",
                 path);
out:
    free(b);
    return rc;
}

/* Parse `count` directory entries from d (len bytes) into z->e. */
static int parse_directory(ddp_npz *z, const unsigned char *d, uint64_t len, uint64_t count,
                           char *err, size_t errlen)
{
    z->e = ddp_calloc(count ? (size_t)count : 1, sizeof *z->e);
    uint64_t p = 0;
    for (z->n = 0; (uint64_t)z->n < count; z->n++) {
        npz_entry *e = &z->e[z->n];
        if (len - p < 46 || le32(d + p) != 0x02014b50)
            goto bad;
        const unsigned char *h = d + p;
        size_t nl = le16(h + 28), xl = le16(h + 30), cl = le16(h + 32);
        if (len - p - 46 < nl + xl + cl || nl == 0 || nl > ZIP_MAX_NAME)
            goto bad;
        e->flags = le16(h + 8);
        e->method = le16(h + 10);
        e->crc = le32(h + 16);
        e->csize = le32(h + 20);
        e->usize = le32(h + 24);
        e->offset = le32(h + 42);
        e->name = ddp_malloc(nl + 1);
        memcpy(e->name, h + 46, nl);
        e->name[nl] = '\0';
        if (zip64_extra(e, h + 46 + nl, xl, e->usize == 0xFFFFFFFF, e->csize == 0xFFFFFFFF,
                        e->offset == 0xFFFFFFFF) != 0)
            goto bad;
        if (e->offset > z->cd_offset || e->csize > z->cd_offset - e->offset)
            return ddp_err(err, errlen,
                           "%s: member %s lies outside the archive's data; the "
                           "archive is truncated or corrupt",
                           z->path, e->name);
        p += 46 + nl + xl + cl;
    }
    return 0;
bad:
    return ddp_err(err, errlen,
                   "%s: zip directory entry %lld is malformed; the archive is "
                   "corrupt, write it again with numpy.savez",
                   z->path, (long long)z->n);
}

ddp_npz *ddp_npz_open(const char *path, char *err, size_t errlen)
{
    ddp_npz *z = ddp_calloc(1, sizeof *z);
    z->path = ddp_strdup(path);
    unsigned char *d = NULL;
    uint64_t len = 0, count = 0;
    FILE *f = open_regular(path, &z->file_size, err, errlen);
    if (!f || find_directory(f, path, z->file_size, &z->cd_offset, &len, &count, err, errlen))
        goto fail;
    d = ddp_malloc(len ? (size_t)len : 1);
    if (fseeko(f, (off_t)z->cd_offset, SEEK_SET) != 0 || fread(d, 1, len, f) != len) {
        ddp_err(err, errlen, "%s: cannot read the zip directory; the archive is truncated", path);
        goto fail;
    }
    if (parse_directory(z, d, len, count, err, errlen) != 0)
        goto fail;
    size_t kl = 1;
    for (int64_t i = 0; i < z->n; i++)
        kl += strlen(z->e[i].name) + 2;
    z->keys = ddp_calloc(kl, 1);
    for (int64_t i = 0, o = 0; i < z->n; i++) {
        size_t n = strlen(z->e[i].name);
        if (n > 4 && !strcmp(z->e[i].name + n - 4, ".npy"))
            n -= 4;
        o += snprintf(z->keys + o, kl - (size_t)o, "%s%.*s", o ? ", " : "", (int)n, z->e[i].name);
    }
    free(d);
    fclose(f);
    return z;
fail:
    free(d);
    if (f)
        fclose(f);
    ddp_npz_close(z);
    return NULL;
}

/* The entry named KEY.npy, or NULL. */
static const npz_entry *find_entry(const ddp_npz *z, const char *key)
{
    char name[ZIP_MAX_NAME + 8];
    snprintf(name, sizeof name, "%s.npy", key);
    for (int64_t i = 0; i < z->n; i++)
        if (!strcmp(z->e[i].name, name))
            return &z->e[i];
    return NULL;
}

int ddp_npz_has(const ddp_npz *z, const char *key)
{
    return find_entry(z, key) != NULL;
}

const char *ddp_npz_keys(const ddp_npz *z)
{
    return z->keys;
}

ddp_npy *ddp_npz_member(const ddp_npz *z, const char *key, char *err, size_t errlen)
{
    const npz_entry *e = find_entry(z, key);
    if (!e) {
        ddp_err(err, errlen,
                "%s: no array `%s` (it holds: %s); name the arrays with "
                "--images-key and --labels-key",
                z->path, key, z->keys);
        return NULL;
    }
    ddp_npy *a = ddp_calloc(1, sizeof *a);
    size_t nl = strlen(z->path) + strlen(e->name) + 16;
    a->name = ddp_malloc(nl);
    snprintf(a->name, nl, "%s: member %s", z->path, e->name);
    uint64_t size = 0;
    unsigned char lh[30];
    if (!(a->f = open_regular(z->path, &size, err, errlen)))
        goto fail;
    if (e->flags & 1 || (e->method != 0 && e->method != 8)) {
        ddp_err(err, errlen,
                "%s: %s; write the archive with numpy.savez or "
                "numpy.savez_compressed",
                a->name,
                e->flags & 1 ? "is encrypted"
                             : "uses a zip compression other than stored or deflate");
        goto fail;
    }
    if (fseeko(a->f, (off_t)e->offset, SEEK_SET) != 0 || fread(lh, 1, 30, a->f) != 30 ||
        le32(lh) != 0x04034b50) {
        ddp_err(err, errlen, "%s: no local header at offset %llu; the archive is corrupt", a->name,
                (unsigned long long)e->offset);
        goto fail;
    }
    uint64_t data = e->offset + 30 + le16(lh + 26) + le16(lh + 28);
    if (data > z->cd_offset || e->csize > z->cd_offset - data ||
        (e->method == 0 && e->csize != e->usize) || fseeko(a->f, (off_t)data, SEEK_SET) != 0) {
        ddp_err(err, errlen,
                "%s: its data lies outside the archive or its sizes disagree; the "
                "archive is truncated or corrupt",
                a->name);
        goto fail;
    }
    a->is_member = 1;
    a->want_crc = e->crc;
    a->crc = (uint32_t)crc32(0, NULL, 0);
    if (e->method == 8) {
        a->deflated = 1;
        a->zleft = e->csize;
        a->zbuf = ddp_malloc(NPZ_INFLATE_CHUNK);
        if (inflateInit2(&a->z, -15) != Z_OK) {
            ddp_err(err, errlen, "%s: zlib inflateInit2 failed", a->name);
            goto fail;
        }
        a->zinit = 1;
    }
    if (read_header(a, e->usize, err, errlen) != 0)
        goto fail;
    return a;
fail:
    ddp_npy_close(a);
    return NULL;
}

void ddp_npz_close(ddp_npz *z)
{
    if (!z)
        return;
    for (int64_t i = 0; i < z->n; i++)
        free(z->e[i].name);
    free(z->e);
    free(z->keys);
    free(z->path);
    free(z);
}
