/*
 * html.h - the pieces every ddptrain HTML page shares: escaping, the head with its inline
 * style sheet (no script, nothing fetched), and writing through PATH.tmp + rename.
 */
#ifndef DDP_HTML_H
#define DDP_HTML_H

#include <stddef.h>
#include <stdio.h>

struct ddp_json;

void ddp_html_text(FILE *f, const char *s);             /* escaped text */
void ddp_html_value(FILE *f, const struct ddp_json *v); /* a JSON value as text */
/* A JSON value as text the way a person reads it, by the name of its member: a "time" or
 * "*_time" as an ISO 8601 UTC date, "bytes" or "*_bytes" in KiB/MiB/GiB, numbers from 10,000
 * with thousands separators; never 1.7964e+09 (only a magnitude beyond 1e18 keeps its
 * exponent: it is a damaged or diverged value, not a count). */
void ddp_html_member(FILE *f, const char *key, const struct ddp_json *v);
/* x formatted as ddp_html_member would (key may be NULL) into buf; returns buf. */
const char *ddp_html_fmt_num(char *buf, size_t len, const char *key, double x);
void ddp_html_head(FILE *f, const char *title);
void ddp_html_tail(FILE *f);
/* Open path.tmp for writing; NULL with err. */
FILE *ddp_html_open(const char *path, char *err, size_t errlen);
/* Close, fsync and rename path.tmp to path; 0 or -1 with err. */
int ddp_html_close(FILE *f, const char *path, char *err, size_t errlen);

#endif
