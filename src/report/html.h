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
void ddp_html_head(FILE *f, const char *title);
void ddp_html_tail(FILE *f);
/* Open path.tmp for writing; NULL with err. */
FILE *ddp_html_open(const char *path, char *err, size_t errlen);
/* Close, fsync and rename path.tmp to path; 0 or -1 with err. */
int ddp_html_close(FILE *f, const char *path, char *err, size_t errlen);

#endif
