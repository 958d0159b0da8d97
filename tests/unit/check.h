/*
 * check.h - the few assertions the C unit tests share. A failed CHECK prints file:line and the
 * condition, and counts; tests end with `return check_report("name");` which exits 1 on any
 * failure. Plain C, no framework: meson's exit-code protocol is the contract (77 = skipped).
 */
#ifndef DDP_TEST_CHECK_H
#define DDP_TEST_CHECK_H

#include <stdio.h>

extern int check_failures, check_count;

#define CHECK(cond, ...)                                                    \
    do {                                                                    \
        check_count++;                                                      \
        if (!(cond)) {                                                      \
            check_failures++;                                               \
            fprintf(stderr, "%s:%d: FAIL %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                   \
            fputc('\n', stderr);                                            \
        }                                                                   \
    } while (0)

int check_report(const char *name);
/* check_report, then remove the scratch directory dir when every check passed (kept, and
 * named, for a look when one failed). */
int check_report_dir(const char *name, const char *dir);

#endif
