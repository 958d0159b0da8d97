/*
 * ini.c - the table-driven INI reader (inih underneath). See ini.h.
 *
 * inih is driven through ini_parse_stream with our own line reader, so that every value is
 * known with its line number, lines longer than inih's buffer are reported instead of being
 * cut, and continuation lines (leading blanks) are told apart from a key given twice.
 */
#include "core/ini.h"

#include <errno.h>
#include <ini.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/suggest.h"
#include "core/util.h"

#define INI_FILE_MAX (1 << 20) /* an INI file is a page of text; refuse anything absurd */
#define INI_KEYS_MAX 256

void ddp_ini_lower_trim(const char *s, char *out, size_t len)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = 0;
    for (; *s && n + 1 < len; s++)
        out[n++] = (char)((*s >= 'A' && *s <= 'Z') ? *s - 'A' + 'a' : *s);
    while (n > 0 && (out[n - 1] == ' ' || out[n - 1] == '\t'))
        n--;
    out[n] = '\0';
}

void ddp_ini_choices_text(const struct ddp_ini_key *k, char sep, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = '\0';
    for (int i = 0; i < k->nchoices && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, "%s%s", i ? (char[]){sep, 0} : "", k->choices[i]);
}

int ddp_ini_find(const struct ddp_ini_schema *s, const char *section, const char *key)
{
    for (int i = 0; i < s->nkeys; i++)
        if (strcmp(s->keys[i].section, section) == 0 && strcmp(s->keys[i].key, key) == 0)
            return i;
    return -1;
}

int ddp_ini_section_known(const struct ddp_ini_schema *s, const char *section)
{
    for (int i = 0; i < s->nkeys; i++)
        if (strcmp(s->keys[i].section, section) == 0)
            return 1;
    return 0;
}

const char *ddp_ini_hint_section(const struct ddp_ini_schema *s, const char *section, char *out,
                                 size_t len)
{
    const char *cands[INI_KEYS_MAX] = {0};
    const int n = s->nkeys < INI_KEYS_MAX ? s->nkeys : INI_KEYS_MAX;
    for (int i = 0; i < n; i++)
        cands[i] =
            i && !strcmp(s->keys[i].section, s->keys[i - 1].section) ? NULL : s->keys[i].section;
    const char *near = ddp_suggest(section, cands, n);
    if (near)
        snprintf(out, len, " did you mean [%s]?", near);
    else
        out[0] = '\0';
    return out;
}

const char *ddp_ini_hint_key(const struct ddp_ini_schema *s, const char *section, const char *key,
                             char *out, size_t len)
{
    const char *here[INI_KEYS_MAX] = {0}, *all[INI_KEYS_MAX] = {0};
    const int n = s->nkeys < INI_KEYS_MAX ? s->nkeys : INI_KEYS_MAX;
    for (int i = 0; i < n; i++) {
        here[i] = strcmp(s->keys[i].section, section) == 0 ? s->keys[i].key : NULL;
        all[i] = s->keys[i].key;
    }
    const char *near = ddp_suggest(key, here, n);
    out[0] = '\0';
    if (near) {
        snprintf(out, len, " did you mean '%s'?", near);
        return out;
    }
    const char *other = ddp_suggest(key, all, n);
    for (int i = 0; i < n; i++)
        if (strcmp(s->keys[i].key, key) == 0 || s->keys[i].key == other) {
            snprintf(out, len, " did you mean [%s] %s?", s->keys[i].section, s->keys[i].key);
            break;
        }
    return out;
}

static int assign_int(const struct ddp_ini_key *k, char *field, const char *value, char *why,
                      size_t whylen)
{
    int64_t v;
    if (ddp_parse_i64(value, &v) != 0)
        return ddp_err(why, whylen, "'%s' is not an integer; expected a whole number%s", value,
                       k->type == DDP_INI_INT_AUTO ? " or auto" : "");
    if ((double)v < k->min || (double)v > k->max)
        return ddp_err(why, whylen, "%lld is out of range; expected %.0f to %.0f", (long long)v,
                       k->min, k->max);
    if (k->size == sizeof(int))
        *(int *)field = (int)v;
    else
        *(int64_t *)field = v;
    return 0;
}

int ddp_ini_assign(const struct ddp_ini_key *k, void *base, const char *value, char *why,
                   size_t whylen)
{
    char *field = (char *)base + k->off;
    char low[256];
    ddp_ini_lower_trim(value, low, sizeof low);
    switch (k->type) {
    case DDP_INI_INT_AUTO:
        if (strcmp(low, "auto") == 0) {
            if (k->size == sizeof(int))
                *(int *)field = 0;
            else
                *(int64_t *)field = 0;
            return 0;
        }
        /* fall through */
    case DDP_INI_INT:
        return assign_int(k, field, value, why, whylen);
    case DDP_INI_FLOAT: {
        double v;
        if (ddp_parse_f64(value, &v) != 0)
            return ddp_err(why, whylen, "'%s' is not a number; expected e.g. 0.01 or 1e-3", value);
        if (v < k->min || v > k->max)
            return ddp_err(why, whylen, "%g is out of range; expected %g to %g", v, k->min, k->max);
        *(double *)field = v;
        return 0;
    }
    case DDP_INI_BOOL:
        if (!strcmp(low, "true") || !strcmp(low, "yes") || !strcmp(low, "on") || !strcmp(low, "1"))
            *(int *)field = 1;
        else if (!strcmp(low, "false") || !strcmp(low, "no") || !strcmp(low, "off") ||
                 !strcmp(low, "0"))
            *(int *)field = 0;
        else
            return ddp_err(why, whylen, "'%s' is not a boolean; expected true or false", value);
        return 0;
    case DDP_INI_ENUM: {
        for (int idx = 0; idx < k->nchoices; idx++)
            if (strcmp(low, k->choices[idx]) == 0) {
                *(int *)field = idx;
                return 0;
            }
        char alts[128];
        ddp_ini_choices_text(k, '/', alts, sizeof alts);
        return ddp_err(why, whylen, "'%s' is not a choice; expected one of %s", value, alts);
    }
    case DDP_INI_STR: {
        size_t n = strlen(value);
        if (n >= k->size)
            return ddp_err(why, whylen, "value is %zu characters; at most %zu allowed", n,
                           k->size - 1);
        memcpy(field, value, n + 1);
        return 0;
    }
    }
    return ddp_err(why, whylen, "internal: unknown key type");
}

/* Parser state shared by the line reader and the inih handler. */
struct parse_state {
    const struct ddp_ini_schema *s;
    const char *path;
    void *base;
    int *key_line;
    FILE *f;
    int line; /* line number of the line inih is handling */
    int line_too_long;
    int cont; /* the current raw line starts with a blank: a continuation */
    char last_section[64], last_key[64];
    char *err;
    size_t errlen;
    int failed;
};

static int fail_unknown(struct parse_state *ps, const char *section, const char *name);

/* A [section] header the schema does not know is an error on its own line, even when no key
 * follows it (inih reports sections only with their keys). */
static void check_section_line(struct parse_state *ps, const char *line)
{
    while (*line == ' ' || *line == '\t')
        line++;
    const char *end = line[0] == '[' ? strchr(line, ']') : NULL;
    if (!end || ps->failed)
        return;
    char name[64];
    snprintf(name, sizeof name, "%.*s", (int)(end - line - 1), line + 1);
    if (!ddp_ini_section_known(ps->s, name))
        fail_unknown(ps, name, NULL);
}

/* ini_reader: hands inih one line at a time, counting lines; a line that would not fit
 * inih's buffer is flagged (inih would otherwise split it silently). */
static char *read_line(char *str, int num, void *stream)
{
    struct parse_state *ps = stream;
    char buf[8192];
    if (!fgets(buf, sizeof buf, ps->f))
        return NULL;
    ps->line++;
    size_t n = strlen(buf);
    if (n == sizeof buf - 1 && buf[n - 1] != '\n') { /* drain an absurdly long line */
        int c;
        while ((c = fgetc(ps->f)) != EOF && c != '\n')
            ;
    }
    ps->cont = (buf[0] == ' ' || buf[0] == '\t');
    check_section_line(ps, buf);
    if (n >= (size_t)num - 1 && !(n == (size_t)num - 1 && buf[n - 1] == '\n')) {
        if (!ps->line_too_long)
            ps->line_too_long = ps->line;
        n = (size_t)num - 2;
        buf[n] = '\0';
    }
    memcpy(str, buf, n + 1);
    return str;
}

static int fail_at(struct parse_state *ps, const char *section, const char *key, const char *fmt,
                   const char *why)
{
    if (!ps->failed) {
        ps->failed = 1;
        if (key)
            snprintf(ps->err, ps->errlen, "%s:%d: [%s] %s: %s", ps->path, ps->line, section, key,
                     why);
        else
            snprintf(ps->err, ps->errlen, fmt, ps->path, ps->line, section, why);
    }
    return 0;
}

/* An unknown section or key: the reason with the hint and what the file may hold. */
static int fail_unknown(struct parse_state *ps, const char *section, const char *name)
{
    const struct ddp_ini_schema *s = ps->s;
    char why[DDP_ERR_LEN], known[512] = "", hint[160];
    size_t used = 0;
    if (!ddp_ini_section_known(s, section)) {
        for (int i = 0; i < s->nkeys; i++)
            if ((!i || strcmp(s->keys[i].section, s->keys[i - 1].section) != 0) &&
                used < sizeof known - 40)
                used += (size_t)snprintf(known + used, sizeof known - used, "%s[%s]",
                                         used ? " " : "", s->keys[i].section);
        snprintf(why, sizeof why, "unknown section;%s expected one of %s",
                 ddp_ini_hint_section(s, section, hint, sizeof hint), known);
        return fail_at(ps, section, NULL, "%s:%d: [%s]: %s", why);
    }
    for (int i = 0; i < s->nkeys; i++)
        if (strcmp(s->keys[i].section, section) == 0 && used < sizeof known - 40)
            used += (size_t)snprintf(known + used, sizeof known - used, "%s%s", used ? ", " : "",
                                     s->keys[i].key);
    snprintf(why, sizeof why, "unknown key;%s [%s] takes %s",
             ddp_ini_hint_key(s, section, name, hint, sizeof hint), section, known);
    return fail_at(ps, section, name, NULL, why);
}

static int on_value(void *user, const char *section, const char *name, const char *value)
{
    struct parse_state *ps = user;
    char why[DDP_ERR_LEN];
    if (ps->failed)
        return 0;
    if (section[0] == '\0')
        return fail_at(ps, "", name, NULL,
                       "key outside any section; put it under its [section] header");
    int k = ddp_ini_find(ps->s, section, name);
    if (k < 0)
        return fail_unknown(ps, section, name);
    const struct ddp_ini_key *kd = &ps->s->keys[k];
    if (ps->cont && strcmp(ps->last_section, section) == 0 && strcmp(ps->last_key, name) == 0) {
        /* continuation line: append to the value so far */
        if (kd->type != DDP_INI_STR || !ps->s->continuation)
            return fail_at(ps, section, name, NULL,
                           "continuation line for a non-text key; write the value on one line");
        char *field = (char *)ps->base + kd->off;
        size_t have = strlen(field), add = strlen(value);
        if (have + 1 + add >= kd->size)
            return fail_at(ps, section, name, NULL, "value too long after continuation lines");
        field[have] = ' ';
        memcpy(field + have + 1, value, add + 1);
        return 1;
    }
    if (ps->key_line[k] > 0) {
        snprintf(why, sizeof why, "given twice (first on line %d); keep one", ps->key_line[k]);
        return fail_at(ps, section, name, NULL, why);
    }
    if (ddp_ini_assign(kd, ps->base, value, why, sizeof why) != 0)
        return fail_at(ps, section, name, NULL, why);
    ps->key_line[k] = ps->line;
    snprintf(ps->last_section, sizeof ps->last_section, "%s", section);
    snprintf(ps->last_key, sizeof ps->last_key, "%s", name);
    return 1;
}

/* The whole file, NUL-terminated, into *text (*len bytes) from a descriptor that is known to
 * be a regular file. Fails (-1, err) on a read error or past INI_FILE_MAX bytes. */
static int read_bytes(int fd, const struct ddp_ini_schema *s, const char *path, char **text,
                      size_t *len, char *err, size_t errlen)
{
    size_t cap = 4096, n = 0;
    char *buf = ddp_malloc(cap);
    for (;;) {
        if (n + 1 == cap)
            buf = ddp_realloc(buf, cap *= 2);
        ssize_t got = read(fd, buf + n, cap - n - 1);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            int e = errno;
            free(buf);
            return ddp_err(err, errlen, "%s: cannot read %s: %s", path, s->what, strerror(e));
        }
        if (got == 0)
            break;
        n += (size_t)got;
        if (n > INI_FILE_MAX) {
            free(buf);
            return ddp_err(err, errlen,
                           "%s: larger than %d bytes; is this a %s? give an INI file (%s)", path,
                           INI_FILE_MAX, s->what, s->doc);
        }
    }
    buf[n] = '\0';
    *text = buf;
    *len = n;
    return 0;
}

/* An INI file is text: a NUL byte (which would silently cut the line) or a control character
 * other than tab and CR is an error naming line and column. */
static int check_bytes(const char *text, size_t len, const struct ddp_ini_schema *s,
                       const char *path, char *err, size_t errlen)
{
    int line = 1, col = 1;
    for (size_t i = 0; i < len; i++, col++) {
        unsigned char c = (unsigned char)text[i];
        if (c == '\n') {
            line++;
            col = 0;
            continue;
        }
        if ((c >= 0x20 && c != 0x7f) || c == '\t' || c == '\r')
            continue;
        return ddp_err(err, errlen,
                       "%s:%d: %s byte 0x%02x at column %d; a %s is plain text, remove it (is "
                       "this a binary file?)",
                       path, line, c == 0 ? "NUL" : "control", c, col, s->what);
    }
    return 0;
}

/* Parse the text (len > 0 bytes) of path. */
static int parse_text(const struct ddp_ini_schema *s, const char *path, char *text, size_t len,
                      void *base, int *key_line, char *err, size_t errlen)
{
    FILE *f = fmemopen(text, len, "r"); /* inih reads lines from a stream */
    if (!f)
        return ddp_err(err, errlen, "%s: cannot read %s: %s", path, s->what, strerror(errno));
    struct parse_state ps = {.s = s,
                             .path = path,
                             .base = base,
                             .key_line = key_line,
                             .f = f,
                             .err = err,
                             .errlen = errlen};
    int rc = ini_parse_stream(read_line, &ps, on_value, &ps);
    fclose(f);
    if (ps.line_too_long && (!ps.failed || ps.line_too_long <= ps.line))
        return ddp_err(
            err, errlen, "%s:%d: line longer than %d characters; %s", path, ps.line_too_long, 198,
            s->continuation ? "continue a long value on the next line, indented" : "shorten it");
    if (ps.failed)
        return -1;
    if (rc > 0)
        return ddp_err(err, errlen,
                       "%s:%d: not INI syntax; expected [section], key = value, or ; comment", path,
                       rc);
    if (rc < 0)
        return ddp_err(err, errlen, "%s: cannot read %s", path, s->what);
    return 0;
}

int ddp_ini_load(const struct ddp_ini_schema *s, const char *path, void *base, int *key_line,
                 char **text_out, char *err, size_t errlen)
{
    const char *kind = NULL;
    int fd = ddp_open_regular(path, &kind);
    if (fd < 0 && kind && strcmp(kind, "file") != 0)
        return ddp_err(err, errlen, "%s: is a %s, not a %s; give the path of an INI file (%s)",
                       path, kind, s->what, s->doc);
    if (fd < 0)
        return ddp_err(err, errlen, "%s: cannot open %s: %s", path, s->what, strerror(errno));
    char *text = NULL;
    size_t len = 0;
    int rc = read_bytes(fd, s, path, &text, &len, err, errlen);
    close(fd);
    if (rc != 0)
        return -1;
    rc = check_bytes(text, len, s, path, err, errlen);
    if (rc == 0 && len > 0) /* an empty file: every default */
        rc = parse_text(s, path, text, len, base, key_line, err, errlen);
    if (text_out)
        *text_out = text;
    else
        free(text);
    return rc;
}
