/*
 * dl.h - a shared library opened at run time into a table of function pointers: the one loader
 * of cuBLAS, cuDNN (backend/cuda/dlopen.cu) and NCCL (comm/comm_nccl.c), which the build
 * compiles against but does not link, so that a process that never needs them neither pays for
 * their constructors nor fails to start where they are missing.
 *
 * It tries the sonames in order (dlopen's search: LD_LIBRARY_PATH, the binary's run path, the
 * system's), copies each symbol's address into the caller's table and keeps the library open.
 * Failures are one line in one of two forms:
 *   cannot load WHAT (SONAME[, SONAME...]): DLERROR; FIX
 *   SONAME has no SYMBOL: not the WHAT VERSION this build expects
 * It does not remember the outcome: opening once per process is the caller's.
 */
#ifndef DDP_CORE_DL_H
#define DDP_CORE_DL_H

#include <stddef.h>

/* One entry of a table: the symbol and the offset of its pointer in the table. */
struct ddp_dl_sym {
    const char *name;
    size_t off;
};

struct ddp_dl_lib {
    const char *what;           /* "cuBLAS": how the messages name it */
    const char *const *sonames; /* tried in order; NULL-terminated */
    const char *fix;            /* what to do when none loads */
    const char *version;        /* "13.x": the version a missing symbol's message expects */
    const struct ddp_dl_sym *syms;
    size_t nsyms;
};

/* Open lib and fill table. 0; -1 with one line in err (none of the sonames loads, or a
 * symbol is missing: the table is then partly filled and must not be used). */
int ddp_dl_open(const struct ddp_dl_lib *lib, void *table, char *err, size_t errlen);

/* The same where only the first nrequired symbols must be there: a later one the library lacks
 * (a newer function than its version has) leaves its pointer as the caller set it (NULL in a
 * zeroed table), and the caller reports what it would have given as not reported. */
int ddp_dl_open_some(const struct ddp_dl_lib *lib, size_t nrequired, void *table, char *err,
                     size_t errlen);

#endif
