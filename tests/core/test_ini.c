/*
 * test_ini.c - the table-driven INI reader (core/ini.h) on files written to a scratch
 * directory: every type and range, duplicates, unknown sections and keys with their hints,
 * continuation lines, and the files that must be refused without being read.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "core/ini.h"

struct settings {
    int n;
    int64_t big;
    double x;
    int flag;
    int pick;
    int threads;
    char text[64];
};

static const char *const PICKS[] = {"alpha", "beta", "gamma"};

static const struct ddp_ini_key KEYS[] = {
    {"a", "n", DDP_INI_INT, offsetof(struct settings, n), sizeof(int), 1, 10, NULL, 0},
    {"a", "big", DDP_INI_INT, offsetof(struct settings, big), sizeof(int64_t), 0, 1e12, NULL, 0},
    {"a", "x", DDP_INI_FLOAT, offsetof(struct settings, x), sizeof(double), -1, 1, NULL, 0},
    {"b", "flag", DDP_INI_BOOL, offsetof(struct settings, flag), sizeof(int), 0, 1, NULL, 0},
    {"b", "pick", DDP_INI_ENUM, offsetof(struct settings, pick), sizeof(int), 0, 0, PICKS, 3},
    {"b", "threads", DDP_INI_INT_AUTO, offsetof(struct settings, threads), sizeof(int), 1, 64, NULL,
     0},
    {"c", "text", DDP_INI_STR, offsetof(struct settings, text), 64, 0, 0, NULL, 0},
};
static const struct ddp_ini_schema SCHEMA = {KEYS, (int)(sizeof KEYS / sizeof KEYS[0]), "test file",
                                             "docs/test.md", 1};

static char g_dir[] = "/tmp/test_ini.XXXXXX";

static const char *write_file(const char *name, const char *body, size_t len)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    FILE *f = fopen(path, "wb");
    fwrite(body, 1, len, f);
    fclose(f);
    return path;
}

/* Load body; returns the loader's result with s and err filled. */
static int load(const char *body, struct settings *s, int *lines, char *err, size_t errlen)
{
    const char *path = write_file("t.ini", body, strlen(body));
    memset(s, 0, sizeof *s);
    memset(lines, 0, sizeof(int) * SCHEMA.nkeys);
    return ddp_ini_load(&SCHEMA, path, s, lines, NULL, err, errlen);
}

/* body must be refused with a message holding each of the NULL-ended fragments. */
static void refused(const char *body, ...)
{
    struct settings s;
    int lines[16];
    char err[512] = "";
    int rc = load(body, &s, lines, err, sizeof err);
    CHECK(rc == -1, "accepted: %s", body);
    va_list ap;
    va_start(ap, body);
    for (const char *frag; (frag = va_arg(ap, const char *));)
        CHECK(strstr(err, frag), "message '%s' lacks '%s' (file: %s)", err, frag, body);
    va_end(ap);
    CHECK(!strchr(err, '\n'), "message is not one line: %s", err);
}

static void test_types(void)
{
    struct settings s;
    int lines[16];
    char err[512] = "";
    int rc = load("; comment\n[a]\nn = 7\nbig = 1000000000000\nx = -0.25\n"
                  "[b]\nflag = Yes\npick = GAMMA\nthreads = auto\n[c]\ntext = hello world\n",
                  &s, lines, err, sizeof err);
    CHECK(rc == 0, "valid file refused: %s", err);
    CHECK(s.n == 7 && s.big == 1000000000000LL && s.x == -0.25, "numbers %d %lld %g", s.n,
          (long long)s.big, s.x);
    CHECK(s.flag == 1 && s.pick == 2 && s.threads == 0, "flag %d pick %d threads %d", s.flag,
          s.pick, s.threads);
    CHECK(strcmp(s.text, "hello world") == 0, "text '%s'", s.text);
    CHECK(lines[0] == 3 && lines[2] == 5 && lines[6] == 11, "lines %d %d %d", lines[0], lines[2],
          lines[6]);
    CHECK(lines[5] == 9, "threads line %d", lines[5]);

    rc = load("[b]\nflag = off\nthreads = 12\n", &s, lines, err, sizeof err);
    CHECK(rc == 0 && s.flag == 0 && s.threads == 12, "off/12: rc %d %s", rc, err);
    CHECK(lines[0] == 0, "a key not given has line %d", lines[0]);
}

static void test_refusals(void)
{
    refused("[a]\nn = 11\n", "t.ini:2", "[a] n", "out of range", "1 to 10", NULL);
    refused("[a]\nn = 0\n", "t.ini:2", "out of range", NULL);
    refused("[a]\nn = 3.5\n", "t.ini:2", "not an integer", NULL);
    refused("[a]\nn = 1e99999\n", "t.ini:2", NULL);
    refused("[a]\nx = 2\n", "t.ini:2", "[a] x", NULL);
    refused("[a]\nx = nan\n", "t.ini:2", "[a] x", NULL);
    refused("[a]\nx = abc\n", "t.ini:2", NULL);
    refused("[b]\nflag = maybe\n", "t.ini:2", "[b] flag", NULL);
    refused("[b]\npick = delta\n", "t.ini:2", "alpha", "gamma", NULL);
    refused("[b]\nthreads = 0\n", "t.ini:2", "[b] threads", NULL);
    refused("[a]\nn = 2\nn = 3\n", "t.ini:3", "[a] n", NULL);
    refused("[a]\nnn = 2\n", "t.ini:2", "did you mean 'n'", NULL);
    refused("[a]\nflag = 1\n", "t.ini:2", "did you mean [b] flag", NULL);
    refused("[bb]\nflag = 1\n", "t.ini:1", "unknown section", "did you mean [b]", NULL);
    refused("[a]\nn = 1\n[bogus]\n", "t.ini:3", "[bogus]", "unknown section", NULL);
    refused("n = 1\n[a]\n", "t.ini:1", NULL);
    refused("[c]\ntext = 0123456789012345678901234567890123456789012345678901234567890123456789\n",
            "t.ini:2", "[c] text", NULL);
}

static void test_continuation(void)
{
    struct settings s;
    int lines[16];
    char err[512] = "";
    int rc = load("[c]\ntext = one,\n   two,\n\tthree\n[a]\nn = 2\n", &s, lines, err, sizeof err);
    CHECK(rc == 0, "continuation refused: %s", err);
    CHECK(strstr(s.text, "one,") && strstr(s.text, "two,") && strstr(s.text, "three"),
          "continued text '%s'", s.text);
    CHECK(lines[6] == 2 && s.n == 2, "text line %d, n %d", lines[6], s.n);
}

static void test_files(void)
{
    struct settings s;
    int lines[16];
    char err[512] = "", path[600];

    /* a NUL byte and a control byte, named by line */
    const char nul[] = "[a]\nn = 1\nx = 0\0.5\n";
    const char *p = write_file("nul.ini", nul, sizeof nul - 1);
    CHECK(ddp_ini_load(&SCHEMA, p, &s, lines, NULL, err, sizeof err) == -1 && strstr(err, ":3"),
          "NUL byte: %s", err);
    p = write_file("ctl.ini", "[a]\nn = \0331\n", 11);
    CHECK(ddp_ini_load(&SCHEMA, p, &s, lines, NULL, err, sizeof err) == -1 && strstr(err, ":2"),
          "control byte: %s", err);

    /* a line longer than inih's buffer is an error, not a cut value */
    size_t n = 100000;
    char *longline = malloc(n + 16);
    memcpy(longline, "[c]\ntext = ", 11);
    memset(longline + 11, 'x', n);
    longline[11 + n] = '\n';
    p = write_file("long.ini", longline, 12 + n);
    free(longline);
    CHECK(ddp_ini_load(&SCHEMA, p, &s, lines, NULL, err, sizeof err) == -1 && strstr(err, ":2"),
          "long line: %s", err);

    /* a directory, a FIFO, a missing file, a file over the size limit */
    CHECK(ddp_ini_load(&SCHEMA, g_dir, &s, lines, NULL, err, sizeof err) == -1, "directory read");
    snprintf(path, sizeof path, "%s/fifo", g_dir);
    CHECK(mkfifo(path, 0600) == 0, "mkfifo");
    CHECK(ddp_ini_load(&SCHEMA, path, &s, lines, NULL, err, sizeof err) == -1 &&
              strstr(err, "fifo"),
          "FIFO: %s", err);
    snprintf(path, sizeof path, "%s/absent.ini", g_dir);
    CHECK(ddp_ini_load(&SCHEMA, path, &s, lines, NULL, err, sizeof err) == -1 &&
              strstr(err, "absent.ini"),
          "missing: %s", err);
    snprintf(path, sizeof path, "%s/huge.ini", g_dir);
    FILE *f = fopen(path, "w");
    CHECK(f && ftruncate(fileno(f), 64 << 20) == 0, "sparse file");
    fclose(f);
    CHECK(ddp_ini_load(&SCHEMA, path, &s, lines, NULL, err, sizeof err) == -1 &&
              strstr(err, "huge.ini"),
          "64 MiB file: %s", err);
    unlink(path);

    /* text: the file's bytes come back */
    char *text = NULL;
    memset(lines, 0, sizeof lines); /* a key whose line is already set would be a duplicate */
    p = write_file("t2.ini", "[a]\nn = 4\n", 10);
    CHECK(ddp_ini_load(&SCHEMA, p, &s, lines, &text, err, sizeof err) == 0 && text &&
              strcmp(text, "[a]\nn = 4\n") == 0,
          "text back: %s", text ? text : "(null)");
    free(text);
}

static void test_helpers(void)
{
    char out[128];
    ddp_ini_lower_trim("  MiXeD Case \t", out, sizeof out);
    CHECK(strcmp(out, "mixed case") == 0, "lower_trim '%s'", out);
    ddp_ini_choices_text(&KEYS[4], '|', out, sizeof out);
    CHECK(strcmp(out, "alpha|beta|gamma") == 0, "choices '%s'", out);
    CHECK(ddp_ini_find(&SCHEMA, "b", "pick") == 4 && ddp_ini_find(&SCHEMA, "a", "pick") == -1,
          "find");
    CHECK(ddp_ini_section_known(&SCHEMA, "c") && !ddp_ini_section_known(&SCHEMA, "d"), "section");
    ddp_ini_hint_key(&SCHEMA, "a", "zzzzzzzz", out, sizeof out);
    CHECK(out[0] == '\0', "no hint for a far key: '%s'", out);
}

int main(void)
{
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_types();
    test_refusals();
    test_continuation();
    test_files();
    test_helpers();
    char path[600];
    snprintf(path, sizeof path, "%s/fifo", g_dir);
    unlink(path);
    return check_report_dir("test_ini", g_dir);
}
