/*
 * json.h - a small JSON reader for the files ddptrain itself writes (metrics.jsonl lines,
 * `validate --json`), read back by `ddptrain report`. Input is treated as hostile: nesting
 * deeper than DDP_JSON_DEPTH_MAX and malformed text are errors, never crashes. Numbers follow
 * JSON's grammar, plus the NaN, Infinity and -Infinity that Python's json module writes.
 *
 * It does not write JSON (metrics.c, validate.c do) and keeps \u escapes below 0x80 only
 * (others become '?': the report shows names, not arbitrary Unicode).
 */
#ifndef DDP_JSON_H
#define DDP_JSON_H

#include <stddef.h>

#define DDP_JSON_DEPTH_MAX 32 /* ddptrain's own files nest 4 deep */

enum ddp_json_type {
    DDP_JSON_NULL,
    DDP_JSON_BOOL,
    DDP_JSON_NUM,
    DDP_JSON_STR,
    DDP_JSON_ARR,
    DDP_JSON_OBJ
};

struct ddp_json {
    enum ddp_json_type type;
    double num;             /* NUM; BOOL: 0 or 1 */
    char *str;              /* STR (owned) */
    int n;                  /* ARR, OBJ: items */
    char **keys;            /* OBJ: n keys (owned) */
    struct ddp_json *items; /* ARR, OBJ: n values (owned) */
};

/* Parse text (one value, surrounding blanks allowed). NULL with a reason in err. The caller
 * frees the result with ddp_json_free. */
struct ddp_json *ddp_json_parse(const char *text, char *err, size_t errlen);
void ddp_json_free(struct ddp_json *v); /* accepts NULL */
/* Member key of an object, or NULL (also when v is not an object). */
const struct ddp_json *ddp_json_get(const struct ddp_json *v, const char *key);
/* Member key as a number (NaN when absent, null or not a number) / a string (def if not). */
double ddp_json_num(const struct ddp_json *v, const char *key);
const char *ddp_json_text(const struct ddp_json *v, const char *key, const char *def);

#endif
