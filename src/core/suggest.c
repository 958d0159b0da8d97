/* suggest.c - nearest-name suggestions. See suggest.h. */
#include "core/suggest.h"

#include <ctype.h>
#include <string.h>
#include <strings.h>

#define NAME_CAP 64 /* longer names are compared on their first 64 characters */

int ddp_edit_distance(const char *a, const char *b)
{
    int na = (int)strnlen(a, NAME_CAP), nb = (int)strnlen(b, NAME_CAP);
    int d[NAME_CAP + 1][NAME_CAP + 1];
    for (int i = 0; i <= na; i++)
        d[i][0] = i;
    for (int j = 0; j <= nb; j++)
        d[0][j] = j;
    for (int i = 1; i <= na; i++)
        for (int j = 1; j <= nb; j++) {
            int cost = tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]);
            int v = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < v)
                v = d[i][j - 1] + 1;
            if (d[i - 1][j - 1] + cost < v)
                v = d[i - 1][j - 1] + cost;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < v)
                v = d[i - 2][j - 2] + 1;
            d[i][j] = v;
        }
    return d[na][nb];
}

const char *ddp_suggest(const char *word, const char *const *cands, int n)
{
    size_t len = strlen(word);
    int limit = (int)len / 3 > 1 ? (int)len / 3 : 1, best_d = limit + 1;
    const char *best = NULL;
    for (int i = 0; i < n; i++) {
        if (!cands[i])
            continue;
        if (strcasecmp(cands[i], word) == 0)
            return NULL;
        int dist = ddp_edit_distance(word, cands[i]);
        if (len >= 3 && strncasecmp(cands[i], word, len) == 0 && dist > 0 && best_d > limit)
            dist = limit; /* a prefix: "epoch" for "epochs" */
        if (dist < best_d) {
            best_d = dist;
            best = cands[i];
        }
    }
    return best;
}
