/* html.c - shared HTML page pieces. See html.h. */
#include "report/html.h"

#include <errno.h>
#include <string.h>

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

void ddp_html_value(FILE *f, const struct ddp_json *v)
{
    switch (v->type) {
    case DDP_JSON_NULL:
        fputs("-", f);
        break;
    case DDP_JSON_BOOL:
        fputs(v->num ? "yes" : "no", f);
        break;
    case DDP_JSON_NUM:
        fprintf(f, "%.6g", v->num);
        break;
    case DDP_JSON_STR:
        ddp_html_text(f, v->str);
        break;
    default:
        for (int i = 0; i < v->n && i < 64; i++) {
            fputs(i ? ", " : "", f);
            ddp_html_value(f, &v->items[i]);
        }
        if (v->n > 64)
            fprintf(f, ", ... (%d in all)", v->n);
    }
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
          ".xl{font-size:11px;text-anchor:middle}.ml{font-size:9px}\n"
          "polyline{fill:none;stroke-width:1.5}.second{stroke-dasharray:5 "
          "3}.third{stroke-dasharray:1 2}\n"
          ".legend line{stroke-width:2}.legend span{margin-right:12px}\n"
          ".epoch{stroke:#bbb;stroke-dasharray:2 3}.resume{stroke:#2ca02c;fill:#2ca02c}\n"
          ".stop{stroke:#d62728;fill:#d62728;stroke-dasharray:4 2}\n"
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
