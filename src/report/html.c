/* html.c - shared HTML page pieces. See html.h. */
#include "report/html.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <time.h>

#include "job/config.h"
#include "nn/weights.h"
#include "report/json.h"
#include "core/fileio.h"
#include "core/util.h"

void ddp_html_text(FILE *f, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '<':
            fputs("&lt;", f);
            break;
        case '>':
            fputs("&gt;", f);
            break;
        case '&':
            fputs("&amp;", f);
            break;
        case '"':
            fputs("&quot;", f);
            break;
        default:
            if ((unsigned char)*s < 0x20 && *s != '\n' && *s != '\t')
                fputc('?', f);
            else
                fputc(*s, f);
        }
    }
}

/* Beyond this magnitude a number is not a count or a size but a damaged or diverged value;
 * it keeps its exponent (1e+30) so that it reads as what it is. */
#define PLAIN_MAX 1e18

/* |x| (< PLAIN_MAX) with `decimals` decimals and a comma every three digits: 1,048,576. */
static void with_commas(char *buf, size_t len, double x, int decimals)
{
    char raw[48];
    snprintf(raw, sizeof raw, "%.*f", decimals, fabs(x));
    size_t digits = strcspn(raw, "."), o = 0;
    if (x < 0 && strspn(raw, "0.") != strlen(raw) && o + 1 < len)
        buf[o++] = '-';
    for (size_t i = 0; raw[i] && o + 2 < len; i++) {
        if (i > 0 && i < digits && (digits - i) % 3 == 0)
            buf[o++] = ',';
        buf[o++] = raw[i];
    }
    buf[o] = '\0';
}

/* bytes as B, KiB, MiB, GiB, TiB, PiB or EiB with at most four digits: 1 MiB, 117.7 MiB. */
static void as_size(char *buf, size_t len, double x)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    int u = 0;
    double a = fabs(x);
    while (a >= 1024 && u < 6)
        a /= 1024, u++;
    snprintf(buf, len, "%s%.*f %s", x < 0 ? "-" : "",
             u ? (a < 9.995   ? 2
                  : a < 99.95 ? 1
                              : 0)
               : 0,
             a, unit[u]);
    /* 1.00 MiB reads as 1 MiB: drop zeros after the point */
    char *dot = strchr(buf, '.'), *sp = strchr(buf, ' ');
    if (dot && sp) {
        char *end = sp;
        while (end > dot + 1 && end[-1] == '0')
            end--;
        if (end == dot + 1)
            end = dot;
        memmove(end, sp, strlen(sp) + 1);
    }
}

static int ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), m = strlen(tail);
    return n >= m && strcmp(s + n - m, tail) == 0;
}

const char *ddp_html_fmt_num(char *buf, size_t len, const char *key, double x)
{
    key = key ? key : "";
    struct tm tm;
    time_t t = (time_t)x;
    if (!isfinite(x)) {
        snprintf(buf, len, "%s", isnan(x) ? "NaN" : x > 0 ? "inf" : "-inf");
    } else if ((strcmp(key, "time") == 0 || ends_with(key, "_time")) && x > 0 && x < 1e11 &&
               gmtime_r(&t, &tm) && strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm) > 0) {
        /* seconds since the epoch as ISO 8601 UTC: 2026-12-05T20:49:16Z */
    } else if (fabs(x) >= PLAIN_MAX) {
        snprintf(buf, len, "%.6g", x);
    } else if (strcmp(key, "bytes") == 0 || ends_with(key, "_bytes")) {
        as_size(buf, len, x);
    } else if (fabs(x) >= 1e4) {
        with_commas(buf, len, x, fabs(x) < 1e5 && x != trunc(x) ? 1 : 0);
    } else {
        snprintf(buf, len, "%.6g", x);
    }
    return buf;
}

void ddp_html_member(FILE *f, const char *key, const struct ddp_json *v)
{
    char num[64];
    switch (v->type) {
    case DDP_JSON_NULL:
        fputs("-", f);
        break;
    case DDP_JSON_BOOL:
        fputs(v->num ? "yes" : "no", f);
        break;
    case DDP_JSON_NUM:
        fputs(ddp_html_fmt_num(num, sizeof num, key, v->num), f);
        break;
    case DDP_JSON_STR:
        ddp_html_text(f, v->str);
        break;
    default:
        for (int i = 0; i < v->n && i < 64; i++) {
            fputs(i ? ", " : "", f);
            ddp_html_member(f, v->type == DDP_JSON_OBJ ? v->keys[i] : key, &v->items[i]);
        }
        if (v->n > 64)
            fprintf(f, ", ... (%d in all)", v->n);
    }
}

void ddp_html_value(FILE *f, const struct ddp_json *v)
{
    ddp_html_member(f, NULL, v);
}

void ddp_html_head(FILE *f, const char *title)
{
    fprintf(f, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>");
    ddp_html_text(f, title);
    fputs("</title>\n<style>\n"
          "body{font:14px/1.4 system-ui,sans-serif;margin:16px;color:#222}\n"
          "h1{font-size:20px}h2{font-size:17px;margin-top:28px}h3{font-size:14px}\n"
          ".charts{display:flex;flex-wrap:wrap;gap:8px}\n"
          "figure{margin:0;border:1px solid #ddd;padding:4px}figcaption{font-weight:600}\n"
          ".plot{fill:#fff;stroke:#999}.grid{stroke:#eee}\n"
          ".xt{font-size:10px;text-anchor:middle}.yt{font-size:10px;text-anchor:end}\n"
          ".xl{font-size:11px;text-anchor:middle}.ml{font-size:9px}.ml.end{text-anchor:end}\n"
          ".note{color:#a33;font-size:12px;margin:2px 0;max-width:640px}\n"
          "polyline{fill:none;stroke-width:1.5}.second{stroke-dasharray:5 "
          "3}.third{stroke-dasharray:1 2}\n"
          ".legend{max-width:640px}.legend line{stroke-width:2}.legend span{margin-right:12px;"
          "white-space:nowrap}\n"
          ".epoch{stroke:#bbb;stroke-dasharray:2 3}.resume{stroke:#2ca02c;fill:#2ca02c}\n"
          ".stop{stroke:#d62728;fill:#d62728;stroke-dasharray:4 2}text.ml{stroke:none}\n"
          "table{border-collapse:collapse;margin:4px 0}td,th{border:1px solid #ddd;"
          "padding:2px 6px;text-align:left;vertical-align:top}\n"
          ".cols{display:flex;flex-wrap:wrap;gap:24px}.swatch{display:inline-block;width:12px;"
          "height:12px;margin-right:6px}\n.FAIL{background:#fdd}.PASS{background:#dfd}\n"
          "pre{background:#f6f6f6;padding:8px;overflow:auto}\n"
          "</style></head><body>\n",
          f);
}

void ddp_html_tail(FILE *f)
{
    fputs("</body></html>\n", f);
}

FILE *ddp_html_open(const char *path, char *err, size_t errlen)
{
    char tmp[DDP_PATH_MAX + 40];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        ddp_err(err, errlen, "%s: cannot write: %s", tmp, strerror(errno));
    return f;
}

int ddp_html_close(FILE *f, const char *path, char *err, size_t errlen)
{
    char tmp[DDP_PATH_MAX + 40];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int bad = fflush(f) != 0 || ferror(f);
    int e = errno;
    if (fclose(f) != 0 && !bad) {
        bad = 1;
        e = errno;
    }
    if (bad) {
        remove(tmp);
        return ddp_err(err, errlen, "%s: cannot write: %s", tmp, strerror(e));
    }
    return ddp_file_commit(tmp, path, err, errlen);
}
