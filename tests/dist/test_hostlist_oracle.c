/*
 * test_hostlist_oracle.c - ddp_hostlist_expand against `scontrol show hostnames`.
 *
 * usage: test_hostlist_oracle SCONTROL   (an empty path means scontrol is not installed: 77)
 *
 * scontrol needs no daemon once SLURM_CONF names a minimal slurm.conf, written here to a
 * temporary directory. It prints "Invalid hostlist" on stderr and still exits 0 on bad input,
 * so "scontrol accepts" means: exit 0 and nothing on stderr.
 *
 * For every table case marked O_SAME: when we accept, scontrol must accept and print the same
 * hosts in the same order; when we reject, scontrol must reject too. O_SUFFIX, O_QUIRK and
 * O_LIMIT cases are where Slurm 22.05 and we differ on purpose (hostlist_cases.h): skipped.
 * A few large expressions without written-out expansions are compared as well.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dist/hostlist.h"
#include "core/util.h"

#include "hostlist_cases.h"

static char g_dir[] = "/tmp/ddp-hostlist-oracle-XXXXXX";
static char g_out[512], g_errf[512], g_conf[512];

/* Read a whole file into a fresh NUL-terminated string. */
static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return ddp_strdup("");
    size_t cap = 4096, n = 0;
    char *s = ddp_malloc(cap);
    size_t r;
    while ((r = fread(s + n, 1, cap - n - 1, f)) > 0) {
        n += r;
        if (cap - n - 1 == 0) {
            cap *= 2;
            s = ddp_realloc(s, cap);
        }
    }
    s[n] = '\0';
    fclose(f);
    return s;
}

/* Run scontrol show hostnames expr. Returns 1 when it accepts (*out = its stdout with one
 * space between hosts, caller frees), 0 when it rejects, -1 when it could not run. */
static int scontrol(const char *prog, const char *expr, char **out)
{
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        int o = open(g_out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int e = open(g_errf, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (o < 0 || e < 0)
            _exit(126);
        dup2(o, 1);
        dup2(e, 2);
        setenv("SLURM_CONF", g_conf, 1);
        execl(prog, prog, "show", "hostnames", expr, (char *)NULL);
        _exit(127);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return -1;
    if (!WIFEXITED(st) || WEXITSTATUS(st) >= 126)
        return -1;
    char *so = slurp(g_out), *se = slurp(g_errf);
    int ok = WEXITSTATUS(st) == 0 && se[0] == '\0';
    free(se);
    if (!ok) {
        free(so);
        return 0;
    }
    /* newline-separated to space-separated, no trailing blank */
    size_t n = strlen(so);
    while (n > 0 && so[n - 1] == '\n')
        so[--n] = '\0';
    for (size_t i = 0; i < n; i++)
        if (so[i] == '\n')
            so[i] = ' ';
    *out = so;
    return 1;
}

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

/* Compare one expression; returns 1 on disagreement. */
static int compare(const char *prog, const char *expr, int *compared)
{
    char err[DDP_ERR_LEN];
    char **h;
    int n;
    int ours = ddp_hostlist_expand(expr, &h, &n, err, sizeof err) == 0;
    char *theirs = NULL;
    int rc = scontrol(prog, expr, &theirs);
    if (rc < 0) {
        fprintf(stderr, "FAIL: could not run %s\n", prog);
        if (ours)
            ddp_hostlist_free(h, n);
        return 1;
    }
    (*compared)++;
    int bad = 0;
    if (ours && rc == 1) {
        char *mine = join(h, n);
        if (strcmp(mine, theirs) != 0) {
            fprintf(stderr, "FAIL \"%s\": ddptrain \"%.200s\" scontrol \"%.200s\"\n", expr, mine,
                    theirs);
            bad = 1;
        }
        free(mine);
    } else if (ours != rc) {
        fprintf(stderr, "FAIL \"%s\": ddptrain %s, scontrol %s%s%.200s\n", expr,
                ours ? "accepts" : "rejects", rc ? "accepts" : "rejects", rc ? ": " : "",
                rc ? theirs : "");
        bad = 1;
    }
    free(theirs);
    if (ours)
        ddp_hostlist_free(h, n);
    return bad;
}

int main(int argc, char **argv)
{
    if (argc < 2 || argv[1][0] == '\0' || access(argv[1], X_OK) != 0) {
        printf("SKIP: scontrol not installed\n");
        return 77;
    }
    const char *prog = argv[1];
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(g_conf, sizeof g_conf, "%s/slurm.conf", g_dir);
    snprintf(g_out, sizeof g_out, "%s/out", g_dir);
    snprintf(g_errf, sizeof g_errf, "%s/err", g_dir);
    FILE *f = fopen(g_conf, "w");
    if (!f) {
        perror(g_conf);
        return 1;
    }
    fprintf(f, "ClusterName=x\nSlurmctldHost=localhost\nNodeName=n1 CPUs=1 State=UNKNOWN\n"
               "PartitionName=p Nodes=n1 Default=YES\n");
    fclose(f);

    /* scontrol must work at all: a sane case it must accept */
    char *probe = NULL;
    int fails = 0, compared = 0, skipped = 0;
    if (scontrol(prog, "n[1-2]", &probe) != 1 || strcmp(probe, "n1 n2") != 0) {
        fprintf(stderr,
                "FAIL: %s show hostnames n[1-2] does not print n1 n2 with the minimal "
                "slurm.conf in %s\n",
                prog, g_dir);
        fails++;
    }
    free(probe);

    for (int i = 0; i < HL_NCASES; i++) {
        if (HL_CASES[i].oracle != O_SAME) {
            skipped++;
            continue;
        }
        fails += compare(prog, HL_CASES[i].expr, &compared);
    }
    static const char *extra[] = {
        "n[001-1000]",
        "n[1-65536]",
        "gpu[0-127]",
        "a[1-16]b[1-16]c[1-4]",
        "x[1-3]y[1-3]z[1-3]w[1-2]",
        "n[1-1000,2000-2999]",
        "c[001-100]s[1-2]",
        "r[0-9]n[00-99]",
    };
    for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++)
        fails += compare(prog, extra[i], &compared);

    unlink(g_out);
    unlink(g_errf);
    unlink(g_conf);
    rmdir(g_dir);
    printf("oracle: %d expressions compared with %s, %d skipped (suffix/quirk/limit), %d "
           "disagreements\n",
           compared, prog, skipped, fails);
    return fails ? 1 : 0;
}
