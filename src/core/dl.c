/* dl.c - a shared library opened at run time into a table (see dl.h). */
#include "core/dl.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "core/util.h"

int ddp_dl_open(const struct ddp_dl_lib *lib, void *table, char *err, size_t errlen)
{
    return ddp_dl_open_some(lib, lib->nsyms, table, err, errlen);
}

int ddp_dl_open_some(const struct ddp_dl_lib *lib, size_t nrequired, void *table, char *err,
                     size_t errlen)
{
    char tried[256] = "", why[256] = "not found";
    void *h = NULL;
    const char *soname = NULL;
    for (const char *const *s = lib->sonames; *s && !h; s++) {
        size_t used = strlen(tried);
        snprintf(tried + used, sizeof tried - used, "%s%s", used ? ", " : "", *s);
        h = dlopen(*s, RTLD_NOW | RTLD_LOCAL);
        soname = *s;
        const char *d = h ? NULL : dlerror();
        if (d)
            snprintf(why, sizeof why, "%s", d);
    }
    if (!h)
        return ddp_err(err, errlen, "cannot load %s (%s): %s; %s", lib->what, tried, why, lib->fix);
    for (size_t i = 0; i < lib->nsyms; i++) {
        void *f = dlsym(h, lib->syms[i].name);
        if (!f && i >= nrequired)
            continue;
        if (!f)
            return ddp_err(err, errlen, "%s has no %s: not the %s %s this build expects", soname,
                           lib->syms[i].name, lib->what, lib->version);
        memcpy((char *)table + lib->syms[i].off, &f, sizeof f);
    }
    return 0;
}
