/*
 * test_hostlist.c - ddp_hostlist_expand against the golden table (hostlist_cases.h), the
 * limits, and ddp_hostlist_expand_counts against its own table. Exit 0 when every check
 * passes, 1 otherwise; each failure prints the case.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/hostlist.h"
#include "core/util.h"
#include "check.h"

#include "hostlist_cases.h"

/* Join hosts with single spaces into a fresh string. */
static char *join(char **hosts, int n)
{
    size_t len = 1;
    for (int i = 0; i < n; i++)
        len += strlen(hosts[i]) + 1;
    char *s = ddp_malloc(len), *p = s;
    *p = '\0';
    for (int i = 0; i < n; i++)
        p += sprintf(p, "%s%s", i ? " " : "", hosts[i]);
    return s;
}

/* An error line is non-empty and one line. */
static int one_line(const char *err)
{
    return err[0] != '\0' && strchr(err, '\n') == NULL;
}

static void table(void)
{
    for (int i = 0; i < HL_NCASES; i++) {
        const struct hl_case *c = &HL_CASES[i];
        char err[DDP_ERR_LEN] = "";
        char **hosts = (char **)1;
        int n = -1;
        int rc = ddp_hostlist_expand(c->expr, &hosts, &n, err, sizeof err);
        if (getenv("DDP_TEST_VERBOSE") && rc < 0)
            printf("%-24s -> %s\n", c->expr, err);
        if (c->want) {
            CHECK(rc == 0, "case %d \"%s\": rejected: %s", i, c->expr, err);
            if (rc == 0) {
                char *got = join(hosts, n);
                CHECK(strcmp(got, c->want) == 0, "case %d \"%s\": got \"%s\" want \"%s\"", i,
                      c->expr, got, c->want);
                free(got);
            }
        } else {
            CHECK(rc == -1, "case %d \"%s\": accepted, want rejection (%s)", i, c->expr, c->reason);
            CHECK(hosts == NULL && n == 0, "case %d: outputs not cleared on failure", i);
            CHECK(one_line(err), "case %d \"%s\": error not one line: \"%s\"", i, c->expr, err);
            CHECK(strstr(err, c->reason) != NULL, "case %d \"%s\": error \"%s\" lacks \"%s\"", i,
                  c->expr, err, c->reason);
            CHECK(strstr(err, "hostlist") != NULL, "case %d: error does not say hostlist: %s", i,
                  err);
        }
        if (rc == 0)
            ddp_hostlist_free(hosts, n);
    }
}

/* Big expansions and exact limits. */
static void limits(void)
{
    char err[DDP_ERR_LEN];
    char **h;
    int n;

    CHECK(ddp_hostlist_expand("n[1-65536]", &h, &n, err, sizeof err) == 0, "n[1-65536]: %s", err);
    CHECK(n == 65536 && strcmp(h[0], "n1") == 0 && strcmp(h[65535], "n65536") == 0,
          "n[1-65536]: n=%d", n);
    ddp_hostlist_free(h, n);

    CHECK(ddp_hostlist_expand("n[001-1000]", &h, &n, err, sizeof err) == 0, "%s", err);
    CHECK(n == 1000 && strcmp(h[0], "n001") == 0 && strcmp(h[98], "n099") == 0 &&
              strcmp(h[999], "n1000") == 0,
          "n[001-1000]: n=%d", n);
    ddp_hostlist_free(h, n);

    /* product exactly at the limit, then one over */
    CHECK(ddp_hostlist_expand("a[1-256]b[1-256]", &h, &n, err, sizeof err) == 0, "%s", err);
    CHECK(n == 65536 && strcmp(h[1], "a1b2") == 0 && strcmp(h[256], "a2b1") == 0, "n=%d", n);
    ddp_hostlist_free(h, n);
    CHECK(ddp_hostlist_expand("a[1-256]b[1-256],c", &h, &n, err, sizeof err) == -1,
          "65537 hosts accepted");

    /* name length: 255 ok, 256 rejected, also when only the numbers make it too long */
    char name[300];
    memset(name, 'a', 255);
    name[255] = '\0';
    CHECK(ddp_hostlist_expand(name, &h, &n, err, sizeof err) == 0 && n == 1 && strlen(h[0]) == 255,
          "255-char name: %s", err);
    if (n == 1)
        ddp_hostlist_free(h, n);
    name[255] = 'a';
    name[256] = '\0';
    CHECK(ddp_hostlist_expand(name, &h, &n, err, sizeof err) == -1 &&
              strstr(err, "longer than 255") && strlen(err) < 300,
          "256-char name accepted or bad message: %s", err);
    memset(name, 'a', 254);
    strcpy(name + 254, "[9-10]"); /* a..a9 has 255 characters, a..a10 256 */
    CHECK(ddp_hostlist_expand(name, &h, &n, err, sizeof err) == -1 &&
              strstr(err, "longer than 255"),
          "254+2 digits accepted or bad message: %s", err);
    memset(name, 'a', 254);
    strcpy(name + 254, "[1-9]");
    CHECK(ddp_hostlist_expand(name, &h, &n, err, sizeof err) == 0 && n == 9, "255 with digits");
    if (n == 9)
        ddp_hostlist_free(h, n);

    /* expression length limit */
    size_t big = (size_t)DDP_HOSTLIST_EXPR_MAX + 10;
    char *s = ddp_malloc(big + 1);
    memset(s, ',', big);
    s[big] = '\0';
    CHECK(ddp_hostlist_expand(s, &h, &n, err, sizeof err) == -1 && strstr(err, "longer than"),
          "huge expression accepted");
    s[DDP_HOSTLIST_EXPR_MAX] = '\0';
    CHECK(ddp_hostlist_expand(s, &h, &n, err, sizeof err) == 0 && n == 0,
          "max-length expression of commas: %s", err);
    free(s);

    /* NULL err and tiny errlen are fine; NULL expression is an error */
    CHECK(ddp_hostlist_expand("n[3-1]", &h, &n, NULL, 0) == -1, "NULL err");
    char tiny[8];
    CHECK(ddp_hostlist_expand("n[3-1]", &h, &n, tiny, sizeof tiny) == -1 &&
              strlen(tiny) == sizeof tiny - 1,
          "tiny errlen");
    CHECK(ddp_hostlist_expand(NULL, &h, &n, err, sizeof err) == -1, "NULL expr");
    ddp_hostlist_free(NULL, 0);

    /* a long bad token is quoted cut, the line stays short */
    char *lng = ddp_malloc(5000);
    memset(lng, 'x', 4990);
    strcpy(lng + 4990, "[3-1]");
    CHECK(ddp_hostlist_expand(lng, &h, &n, err, sizeof err) == -1 && strstr(err, "...") &&
              strlen(err) < 400,
          "long token message: %s", err);
    free(lng);
}

struct count_case {
    const char *expr;
    const char *want; /* counts joined by ',' or NULL */
    const char *reason;
};

static const struct count_case COUNT_CASES[] = {
    {"4(x2),3", "4,4,3", NULL},
    {"1", "1", NULL},
    {"2(x1)", "2", NULL},
    {"0,1", "0,1", NULL},
    {"3(x3)", "3,3,3", NULL},
    {"1,2,3", "1,2,3", NULL},
    {" 4(x2) ", "4,4", NULL},
    {"4(x2),3(x1),2", "4,4,3,2", NULL},
    {"1(x2),2(x2),1", "1,1,2,2,1", NULL},
    {"16(x4)", "16,16,16,16", NULL},
    {"1048576", "1048576", NULL},
    {"", NULL, "empty"},
    {"  ", NULL, "empty"},
    {",", NULL, "empty item"},
    {"4,", NULL, "ends with a comma"},
    {",4", NULL, "empty item"},
    {"4(x2),,3", NULL, "empty item"},
    {"4(x0)", NULL, "zero times"},
    {"4(2)", NULL, "malformed"},
    {"4(x2", NULL, "malformed"},
    {"4(x)", NULL, "malformed"},
    {"4x2", NULL, "malformed"},
    {"4(x2)3", NULL, "malformed"},
    {"4(x-1)", NULL, "malformed"},
    {"(x2)", NULL, "does not start with a count"},
    {"a", NULL, "does not start with a count"},
    {"-1", NULL, "does not start with a count"},
    {"+1", NULL, "does not start with a count"},
    {"4 ,3", NULL, "malformed"},
    {"1048577", NULL, "above the limit"},
    {"1(x65537)", NULL, "more than 65536 entries"},
    {"1(x65536),1", NULL, "more than 65536 entries"},
    {"1(x99999999999999999999)", NULL, "malformed"},
};

static void counts(void)
{
    int nc = (int)(sizeof COUNT_CASES / sizeof COUNT_CASES[0]);
    for (int i = 0; i < nc; i++) {
        const struct count_case *c = &COUNT_CASES[i];
        char err[DDP_ERR_LEN] = "";
        int *v = (int *)1, n = -1;
        int rc = ddp_hostlist_expand_counts(c->expr, &v, &n, err, sizeof err);
        if (c->want) {
            CHECK(rc == 0, "counts \"%s\": rejected: %s", c->expr, err);
            if (rc == 0) {
                char got[256] = "";
                size_t off = 0;
                for (int k = 0; k < n && off < sizeof got - 16; k++)
                    off +=
                        (size_t)snprintf(got + off, sizeof got - off, "%s%d", k ? "," : "", v[k]);
                CHECK(strcmp(got, c->want) == 0, "counts \"%s\": got %s want %s", c->expr, got,
                      c->want);
                free(v);
            }
        } else {
            CHECK(rc == -1, "counts \"%s\": accepted", c->expr);
            CHECK(v == NULL && n == 0, "counts \"%s\": outputs not cleared", c->expr);
            CHECK(one_line(err) && strstr(err, c->reason),
                  "counts \"%s\": error \"%s\" lacks \"%s\"", c->expr, err, c->reason);
        }
    }
    int *v, n;
    char err[DDP_ERR_LEN];
    CHECK(ddp_hostlist_expand_counts("1(x65536)", &v, &n, err, sizeof err) == 0 && n == 65536,
          "65536 entries: %s", err);
    if (n == 65536)
        free(v);
    CHECK(ddp_hostlist_expand_counts(NULL, &v, &n, err, sizeof err) == -1, "NULL counts");
}

int main(void)
{
    int valid = 0;
    for (int i = 0; i < HL_NCASES; i++)
        valid += HL_CASES[i].want != NULL;
    table();
    limits();
    counts();
    printf("hostlist: %d table cases (%d valid, %d malformed), %d checks, %d failed\n", HL_NCASES,
           valid, HL_NCASES - valid, check_count, check_failures);
    return check_failures ? 1 : 0;
}
