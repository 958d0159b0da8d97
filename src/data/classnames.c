/*
 * classnames.c - the optional `class_names` dataset of a group (h5data.h): written by the
 * importers (ddp_h5writer_class_names), read and checked when a split opens, and the name
 * check the command line's `--classes NAME,...` shares. A hostile dataset (wrong count,
 * another type or rank, names that are not UTF-8 or too long, more bytes than the bound)
 * is refused with one line naming the file; it is read in pieces, each name checked before
 * it is kept.
 *
 * Legend: K classes (names).
 */
#include "data/h5data.h"

#include "core/util.h"
#include "data/h5_impl.h"

#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Names are read this many at a time (one H5Dread, and its variable-length strings). */
#define NAMES_PIECE 4096

/* Length of the UTF-8 sequence starting at p (n bytes left), or 0 when it is not one:
 * overlong forms, surrogates and code points above U+10FFFF are refused. */
static int utf8_seq(const unsigned char *p, size_t n)
{
    int len;
    unsigned cp;
    if (p[0] < 0x80)
        return 1;
    if (p[0] >= 0xc2 && p[0] <= 0xdf)
        len = 2, cp = p[0] & 0x1fu;
    else if (p[0] >= 0xe0 && p[0] <= 0xef)
        len = 3, cp = p[0] & 0x0fu;
    else if (p[0] >= 0xf0 && p[0] <= 0xf4)
        len = 4, cp = p[0] & 0x07u;
    else
        return 0;
    if ((size_t)len > n)
        return 0;
    for (int i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (p[i] & 0x3fu);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

const char *ddp_class_name_problem(const char *name)
{
    size_t n = strlen(name);
    if (n == 0)
        return "is empty";
    if (n > DDP_H5_MAX_CLASS_NAME)
        return "is longer than 255 bytes";
    const unsigned char *p = (const unsigned char *)name;
    for (size_t i = 0; i < n;) {
        if (p[i] < 0x20 || p[i] == 0x7f)
            return "holds a control character";
        int l = utf8_seq(p + i, n - i);
        if (!l)
            return "is not valid UTF-8";
        i += (size_t)l;
    }
    return NULL;
}

void ddp_class_names_free(char **names, int n)
{
    for (int i = 0; names && i < n; i++)
        free(names[i]);
    free(names);
}

int h5_write_class_names(hid_t g, char *const *names, int n)
{
    hsize_t d = (hsize_t)n;
    hid_t t = H5Tcopy(H5T_C_S1);
    int ok = t >= 0 && H5Tset_size(t, H5T_VARIABLE) >= 0 && H5Tset_cset(t, H5T_CSET_UTF8) >= 0;
    hid_t sp = ok ? H5Screate_simple(1, &d, NULL) : -1;
    hid_t ds =
        sp >= 0 ? H5Dcreate2(g, "class_names", t, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT) : -1;
    ok = ds >= 0 && H5Dwrite(ds, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, names) >= 0;
    if (ds >= 0)
        H5Dclose(ds);
    if (sp >= 0)
        H5Sclose(sp);
    if (t >= 0)
        H5Tclose(t);
    return ok ? 0 : -1;
}

/* Read names [at, at + n) of ds (file type ft) into out[at..]: each checked, *bytes counting
 * their sizes against the bound. 0 or -1 with err. */
static int read_piece(const ddp_h5split *s, hid_t ds, hid_t ft, hsize_t at, hsize_t n, char **out,
                      size_t *bytes, char *err, size_t errlen)
{
    const int var = H5Tis_variable_str(ft) > 0;
    const size_t fsz = var ? 0 : H5Tget_size(ft);
    hid_t mt = H5Tcopy(H5T_C_S1), fs = H5Dget_space(ds), ms = H5Screate_simple(1, &n, NULL);
    H5Tset_cset(mt, H5Tget_cset(ft)); /* HDF5 converts no charset to another */
    H5Tset_size(mt, var ? H5T_VARIABLE : fsz + 1);
    H5Tset_strpad(mt, H5T_STR_NULLTERM);
    char *buf = ddp_calloc(n, var ? sizeof(char *) : fsz + 1);
    int rc = -1;
    if (H5Sselect_hyperslab(fs, H5S_SELECT_SET, &at, NULL, &n, NULL) < 0 ||
        H5Dread(ds, mt, ms, fs, H5P_DEFAULT, buf) < 0) {
        char why[256];
        ddp_err(err, errlen, "%s: %s/class_names cannot be read (%s); write it again", s->path,
                s->group, h5_reason(why, sizeof why));
        goto out;
    }
    for (hsize_t i = 0; i < n; i++) {
        const char *v = var ? ((char **)buf)[i] : buf + i * (fsz + 1);
        const char *bad = v ? ddp_class_name_problem(v) : "is missing";
        if (bad) {
            ddp_err(err, errlen,
                    "%s: %s/class_names: name %llu %s; expected 1 to %d bytes of UTF-8 text "
                    "without control characters (fix the names, or delete the dataset)",
                    s->path, s->group, (unsigned long long)(at + i), bad, DDP_H5_MAX_CLASS_NAME);
            goto out;
        }
        *bytes += strlen(v) + 1 + sizeof(char *);
        if (*bytes > DDP_H5_MAX_CLASS_NAMES_BYTES) {
            ddp_err(err, errlen,
                    "%s: %s/class_names: the names exceed %zu MiB; expected short names", s->path,
                    s->group, DDP_H5_MAX_CLASS_NAMES_BYTES >> 20);
            goto out;
        }
        out[at + i] = ddp_strdup(v);
    }
    rc = 0;
out:
    if (var)
        H5Dvlen_reclaim(mt, ms, H5P_DEFAULT, buf);
    free(buf);
    H5Sclose(ms);
    H5Sclose(fs);
    H5Tclose(mt);
    return rc;
}

/* Check the dataset's type and shape: its number of names into *k, 0 or -1 with err. */
static int names_shape(const ddp_h5split *s, hid_t ds, hid_t ft, int64_t *k, char *err,
                       size_t errlen)
{
    hid_t sp = H5Dget_space(ds);
    hsize_t d[2] = {0, 0};
    int r = sp >= 0 ? H5Sget_simple_extent_ndims(sp) : -1;
    if (r == 1)
        H5Sget_simple_extent_dims(sp, d, NULL);
    if (sp >= 0)
        H5Sclose(sp);
    const H5T_class_t cls = H5Tget_class(ft);
    const size_t fsz = cls == H5T_STRING && H5Tis_variable_str(ft) <= 0 ? H5Tget_size(ft) : 0;
    if (cls != H5T_STRING || r != 1 || fsz > DDP_H5_MAX_CLASS_NAME + 1) {
        char what[64];
        if (cls != H5T_STRING)
            snprintf(what, sizeof what, "holds %s", cls == H5T_INTEGER ? "integers" : "no strings");
        else if (fsz > DDP_H5_MAX_CLASS_NAME + 1)
            snprintf(what, sizeof what, "holds strings of %zu bytes", fsz);
        else
            snprintf(what, sizeof what, "holds strings");
        return ddp_err(err, errlen,
                       "%s: %s/class_names %s, rank %d; expected (classes,) strings of 1 to %d "
                       "bytes, index = label (h5py: group[\"class_names\"] = names)",
                       s->path, s->group, what, r, DDP_H5_MAX_CLASS_NAME);
    }
    if (s->classes > 0 && (int64_t)d[0] != s->classes)
        return ddp_err(err, errlen,
                       "%s: %s/class_names holds %llu names but the group has %d classes; "
                       "give one name per class, index = label (or delete the dataset)",
                       s->path, s->group, (unsigned long long)d[0], s->classes);
    if (d[0] < 1 || d[0] > DDP_H5_MAX_CLASSES)
        return ddp_err(err, errlen,
                       "%s: %s/class_names holds %llu names; expected 1 to %d, one per class "
                       "(or delete the dataset)",
                       s->path, s->group, (unsigned long long)d[0], DDP_H5_MAX_CLASSES);
    *k = (int64_t)d[0];
    return 0;
}

int h5_read_class_names(ddp_h5split *s, hid_t g, char *err, size_t errlen)
{
    if (H5Lexists(g, "class_names", H5P_DEFAULT) <= 0)
        return 0;
    hid_t ds = H5Dopen2(g, "class_names", H5P_DEFAULT);
    if (ds < 0)
        return ddp_err(err, errlen,
                       "%s: %s/class_names is not a dataset; expected (classes,) strings", s->path,
                       s->group);
    hid_t ft = H5Dget_type(ds);
    int64_t k = 0;
    size_t bytes = 0;
    int rc =
        ft < 0 ? ddp_err(err, errlen, "%s: %s/class_names has no readable type", s->path, s->group)
               : names_shape(s, ds, ft, &k, err, errlen);
    char **names = rc ? NULL : ddp_calloc((size_t)k, sizeof *names);
    for (int64_t at = 0; rc == 0 && at < k; at += NAMES_PIECE) {
        hsize_t n = (hsize_t)(k - at < NAMES_PIECE ? k - at : NAMES_PIECE);
        rc = read_piece(s, ds, ft, (hsize_t)at, n, names, &bytes, err, errlen);
    }
    if (ft >= 0)
        H5Tclose(ft);
    H5Dclose(ds);
    if (rc) {
        ddp_class_names_free(names, (int)k);
        return -1;
    }
    s->class_names = names;
    s->nclass_names = (int)k;
    return 0;
}

const char *const *ddp_h5split_class_names(const ddp_h5split *s)
{
    return (const char *const *)s->class_names;
}

int ddp_h5split_class_name_count(const ddp_h5split *s)
{
    return s->nclass_names;
}
