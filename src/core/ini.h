/*
 * ini.h - the one INI reader of ddptrain (inih underneath), driven by a table of keys: the job
 * schema (job/config.c), validate's settings and its expectation files (validate/) all read
 * their files through it, so every file gets the same checks and the same kind of message:
 *
 *   - the file must be a regular file of plain text, at most 1 MiB (a directory, FIFO or
 *     device is refused without being read; a NUL or control byte is named by line and column);
 *   - a line longer than inih's buffer is an error (inih would cut it silently);
 *   - a key given twice, an unknown section or key (with "did you mean"), a key before any
 *     section, a value of the wrong type or out of range: one line "FILE:LINE: [section] key:
 *     what was wrong; expected ..." (callers exit DDP_EXIT_USAGE);
 *   - optionally (the job file's [model] layers), an indented line continues a text value.
 *
 * What a file means beyond its keys (cross-key checks, defaults) stays with the caller.
 */
#ifndef DDP_INI_H
#define DDP_INI_H

#include <stddef.h>

/* Value types. The field a key fills: INT and INT_AUTO an int64_t, or an int where the key's
 * size is sizeof(int) (auto is stored as 0); FLOAT a double; BOOL and ENUM an int (ENUM: the
 * index of the word); STR a char[size]. */
enum ddp_ini_type {
    DDP_INI_INT,
    DDP_INI_FLOAT,
    DDP_INI_BOOL,
    DDP_INI_STR,
    DDP_INI_ENUM,
    DDP_INI_INT_AUTO
};

struct ddp_ini_key {
    const char *section, *key;
    enum ddp_ini_type type;
    size_t off, size;           /* the field in the caller's struct */
    double min, max;            /* inclusive range of numbers */
    const char *const *choices; /* ENUM: the words, in the enum's order */
    int nchoices;
};

struct ddp_ini_schema {
    const struct ddp_ini_key *keys;
    int nkeys;
    const char *what; /* "job file", "validate settings", ...: named in messages */
    const char *doc;  /* where the keys are documented, e.g. "docs/job-file.md" */
    int continuation; /* an indented line continues the previous STR value */
};

/* Read path and set every key it gives in base. key_line (nkeys entries, zero or -1 for keys
 * set elsewhere) receives each key's line; a key whose entry is already > 0 is a duplicate.
 * text: NULL, or receives the file's bytes (NUL-terminated, caller frees). Returns 0, or -1
 * with one line in err. */
int ddp_ini_load(const struct ddp_ini_schema *s, const char *path, void *base, int *key_line,
                 char **text, char *err, size_t errlen);

/* Convert value for key k into base. Returns 0, or -1 with the reason (no location). */
int ddp_ini_assign(const struct ddp_ini_key *k, void *base, const char *value, char *why,
                   size_t whylen);

/* Index of section/key in s, or -1; whether s has the section. */
int ddp_ini_find(const struct ddp_ini_schema *s, const char *section, const char *key);
int ddp_ini_section_known(const struct ddp_ini_schema *s, const char *section);
/* " did you mean [optim]?" for an unknown section, or "". Returns out. */
const char *ddp_ini_hint_section(const struct ddp_ini_schema *s, const char *section, char *out,
                                 size_t len);
/* " did you mean 'epochs'?" (a near key of the section) or " did you mean [optim] lr?" (the key,
 * or a near one, of another section) for an unknown key; or "". Returns out. */
const char *ddp_ini_hint_key(const struct ddp_ini_schema *s, const char *section, const char *key,
                             char *out, size_t len);
/* An ENUM key's words joined by sep ("a/b/c"). */
void ddp_ini_choices_text(const struct ddp_ini_key *k, char sep, char *buf, size_t len);
/* Lowercase copy of s trimmed of blanks (words and booleans are matched this way). */
void ddp_ini_lower_trim(const char *s, char *out, size_t len);

#endif
