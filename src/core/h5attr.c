/* h5attr.c - scalar HDF5 attributes, written and read (see h5attr.h). */
#include "core/h5attr.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

int ddp_h5attr_write(hid_t loc, const char *name, hid_t ftype, hid_t mtype, const void *v)
{
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = sp >= 0 ? H5Acreate2(loc, name, ftype, sp, H5P_DEFAULT, H5P_DEFAULT) : -1;
    herr_t st = a < 0 ? -1 : H5Awrite(a, mtype, v);
    if (a >= 0)
        H5Aclose(a);
    if (sp >= 0)
        H5Sclose(sp);
    return st < 0 ? -1 : 0;
}

int ddp_h5attr_write_i64(hid_t loc, const char *name, int64_t v)
{
    return ddp_h5attr_write(loc, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &v);
}

int ddp_h5attr_write_str(hid_t loc, const char *name, const char *v)
{
    hid_t ty = H5Tcopy(H5T_C_S1);
    H5Tset_size(ty, strlen(v) + 1);
    int rc = ddp_h5attr_write(loc, name, ty, ty, v);
    H5Tclose(ty);
    return rc;
}

int ddp_h5attr_write_vstr(hid_t loc, const char *name, const char *v)
{
    hid_t ty = H5Tcopy(H5T_C_S1);
    H5Tset_size(ty, H5T_VARIABLE);
    H5Tset_cset(ty, H5T_CSET_UTF8);
    int rc = ddp_h5attr_write(loc, name, ty, ty, &v);
    H5Tclose(ty);
    return rc;
}

/* The attribute opened, or -1 when absent (or it does not open). */
static hid_t open_attr(hid_t loc, const char *name)
{
    if (H5Aexists(loc, name) <= 0)
        return -1;
    return H5Aopen(loc, name, H5P_DEFAULT);
}

int ddp_h5attr_read_int(hid_t loc, const char *name, int64_t *v)
{
    hid_t a = open_attr(loc, name);
    if (a < 0)
        return 1;
    hid_t t = H5Aget_type(a), sp = H5Aget_space(a);
    int64_t x = 0;
    int ok = t >= 0 && sp >= 0 && H5Tget_class(t) == H5T_INTEGER &&
             H5Sget_simple_extent_npoints(sp) == 1 && H5Aread(a, H5T_NATIVE_INT64, &x) >= 0;
    if (t >= 0)
        H5Tclose(t);
    if (sp >= 0)
        H5Sclose(sp);
    H5Aclose(a);
    if (ok)
        *v = x;
    return ok ? 0 : -1;
}

int ddp_h5attr_read_f64(hid_t loc, const char *name, double *v)
{
    hid_t a = open_attr(loc, name);
    if (a < 0)
        return 1;
    herr_t st = H5Aread(a, H5T_NATIVE_DOUBLE, v);
    H5Aclose(a);
    return st < 0 ? -1 : 0;
}

/* Read the string attribute a of type t into buf (len > 0); 0 or -1. */
static int read_text(hid_t a, hid_t t, char *buf, size_t len)
{
    hid_t mt = H5Tcopy(H5T_C_S1);
    H5Tset_cset(mt, H5Tget_cset(t)); /* HDF5 will not convert between ASCII and UTF-8 */
    int rc = -1;
    if (H5Tis_variable_str(t) > 0) {
        char *v = NULL;
        H5Tset_size(mt, H5T_VARIABLE);
        if (H5Aread(a, mt, &v) >= 0) {
            snprintf(buf, len, "%s", v ? v : "");
            rc = 0;
        }
        H5free_memory(v);
    } else {
        size_t sz = H5Tget_size(t);
        if (sz > len)
            sz = len; /* bounded by what the caller keeps, whatever the file says */
        char *v = ddp_calloc(1, sz + 1);
        H5Tset_size(mt, sz + 1);
        if (H5Aread(a, mt, v) >= 0) {
            snprintf(buf, len, "%s", v);
            rc = 0;
        }
        free(v);
    }
    H5Tclose(mt);
    return rc;
}

int ddp_h5attr_read_str(hid_t loc, const char *name, char *buf, size_t len)
{
    buf[0] = '\0';
    hid_t a = open_attr(loc, name);
    if (a < 0)
        return 1;
    hid_t t = H5Aget_type(a);
    int rc = t < 0 || H5Tget_class(t) != H5T_STRING ? -2 : read_text(a, t, buf, len);
    if (t >= 0)
        H5Tclose(t);
    H5Aclose(a);
    return rc;
}

size_t ddp_h5attr_str_size(hid_t loc, const char *name)
{
    hid_t a = open_attr(loc, name);
    if (a < 0)
        return 0;
    hid_t t = H5Aget_type(a);
    size_t n =
        t >= 0 && H5Tget_class(t) == H5T_STRING && H5Tis_variable_str(t) <= 0 ? H5Tget_size(t) : 0;
    if (t >= 0)
        H5Tclose(t);
    H5Aclose(a);
    return n;
}
