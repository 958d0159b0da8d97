/*
 * hostlist_cases.h - the golden table for ddp_hostlist_expand, shared by test_hostlist.c
 * (expected expansions written out) and test_hostlist_oracle.c (the same cases against
 * `scontrol show hostnames` of Slurm 22.05).
 *
 * want: the expected hosts separated by single spaces ("" = no host), or NULL when the
 * expression must be rejected; then reason is a fragment the error line must contain.
 * oracle: how Slurm 22.05 treats the case:
 *   O_SAME   scontrol agrees: same hosts in the same order, or rejects it as well;
 *   O_SUFFIX text after the last bracket: newer Slurm accepts it, 22.05 does not (not compared);
 *   O_QUIRK  22.05 misparses: it accepts input we reject (printing garbage such as "bad]",
 *            or ignoring a blank or sign inside brackets), or rejects a tab or newline
 *            separator right after ']'; not compared;
 *   O_LIMIT  over one of our limits (hostlist.h) but within Slurm's; not compared.
 */
#ifndef DDP_TEST_HOSTLIST_CASES_H
#define DDP_TEST_HOSTLIST_CASES_H

#include <stddef.h>

enum { O_SAME, O_SUFFIX, O_QUIRK, O_LIMIT };

struct hl_case {
    const char *expr;
    const char *want;   /* NULL: rejected */
    const char *reason; /* rejected: fragment of the error line */
    int oracle;
};

static const struct hl_case HL_CASES[] = {
    /* plain names and separators; empty tokens are skipped as Slurm does */
    {"n1", "n1", NULL, O_SAME},
    {"n1,n2", "n1 n2", NULL, O_SAME},
    {"n1 n2", "n1 n2", NULL, O_SAME},
    {"n1\tn2", "n1 n2", NULL, O_SAME},
    {"n1\nn2", "n1 n2", NULL, O_SAME},
    {"a,,b", "a b", NULL, O_SAME},
    {",a", "a", NULL, O_SAME},
    {"a,", "a", NULL, O_SAME},
    {"a  b", "a b", NULL, O_SAME},
    {"a b,c", "a b c", NULL, O_SAME},
    {"h[1-3] , h[5]", "h1 h2 h3 h5", NULL, O_SAME},
    {"", "", NULL, O_SAME},
    {",", "", NULL, O_SAME},
    {"   ", "", NULL, O_SAME},
    {"n[1-2],,", "n1 n2", NULL, O_SAME},
    {"n[1-2]\n", "n1 n2", NULL, O_QUIRK}, /* 22.05 rejects a tab or newline after ']' */
    {"n[1-2]\tm", "n1 n2 m", NULL, O_QUIRK},
    {"n[1-2] m", "n1 n2 m", NULL, O_SAME},
    {"n-1", "n-1", NULL, O_SAME},
    {"a.b.c", "a.b.c", NULL, O_SAME},
    {"N[1-2]", "N1 N2", NULL, O_SAME},
    {"a_b[1-2]", "a_b1 a_b2", NULL, O_SAME},
    {"node-01.cluster,node-02.cluster", "node-01.cluster node-02.cluster", NULL, O_SAME},
    {"10.0.0.[1-3]", "10.0.0.1 10.0.0.2 10.0.0.3", NULL, O_SAME},
    /* numbers and ranges */
    {"n[1-3]", "n1 n2 n3", NULL, O_SAME},
    {"n[1-3,5]", "n1 n2 n3 n5", NULL, O_SAME},
    {"n[1,3,5]", "n1 n3 n5", NULL, O_SAME},
    {"n[5]", "n5", NULL, O_SAME},
    {"n[0-0]", "n0", NULL, O_SAME},
    {"n[7-7]", "n7", NULL, O_SAME},
    {"[1-2]", "1 2", NULL, O_SAME},
    {"n5[1-2]", "n51 n52", NULL, O_SAME},
    {"n[4294967295-4294967296]", "n4294967295 n4294967296", NULL, O_SAME},
    /* zero padding: the width of the low bound, per range */
    {"n[01-2]", "n01 n02", NULL, O_SAME},
    {"n[9-11]", "n9 n10 n11", NULL, O_SAME},
    {"n[008-010]", "n008 n009 n010", NULL, O_SAME},
    {"n[00-03]", "n00 n01 n02 n03", NULL, O_SAME},
    {"n[0001]", "n0001", NULL, O_SAME},
    {"n[01-002]", "n01 n02", NULL, O_SAME},
    {"n[001-02]", "n001 n002", NULL, O_SAME},
    {"n[1-01]", "n1", NULL, O_SAME},
    {"n[01,1]", "n01 n1", NULL, O_SAME},
    {"n[1,02-3]", "n1 n02 n03", NULL, O_SAME},
    {"n[9,10-11]", "n9 n10 n11", NULL, O_SAME},
    {"n[98-101]", "n98 n99 n100 n101", NULL, O_SAME},
    {"n[099-101]", "n099 n100 n101", NULL, O_SAME},
    {"n[0998-1001]", "n0998 n0999 n1000 n1001", NULL, O_SAME},
    {"n01,n1", "n01 n1", NULL, O_SAME},
    /* order and duplicates kept */
    {"a[1,1,2]", "a1 a1 a2", NULL, O_SAME},
    {"n[3,1,2]", "n3 n1 n2", NULL, O_SAME},
    {"n[2-3,1-2]", "n2 n3 n1 n2", NULL, O_SAME},
    {"n2,n1,n2", "n2 n1 n2", NULL, O_SAME},
    {"b[3-4],a[1-2]", "b3 b4 a1 a2", NULL, O_SAME},
    {"a[1-2],b[3-4]", "a1 a2 b3 b4", NULL, O_SAME},
    {"a[1-2] b[3-4]", "a1 a2 b3 b4", NULL, O_SAME},
    {"login1,gpu[01-03],cpu[1-2]", "login1 gpu01 gpu02 gpu03 cpu1 cpu2", NULL, O_SAME},
    /* several groups: two leftmost slowest; k groups nest G(k-1) .. G1, Gk */
    {"rack[1-2]-n[3-4]", "rack1-n3 rack1-n4 rack2-n3 rack2-n4", NULL, O_SAME},
    {"n[1-2][3-4]", "n13 n14 n23 n24", NULL, O_SAME},
    {"n[1,2][3]", "n13 n23", NULL, O_SAME},
    {"x[1-2]y[3-4]", "x1y3 x1y4 x2y3 x2y4", NULL, O_SAME},
    {"x[1-2]-[3-4]", "x1-3 x1-4 x2-3 x2-4", NULL, O_SAME},
    {"n[010-012]m[1-2]", "n010m1 n010m2 n011m1 n011m2 n012m1 n012m2", NULL, O_SAME},
    {"a[1-2]b[3-4],c", "a1b3 a1b4 a2b3 a2b4 c", NULL, O_SAME},
    {"r[1-2]c[1-3]n[01-02]",
     "r1c1n01 r1c1n02 r2c1n01 r2c1n02 r1c2n01 r1c2n02 r2c2n01 r2c2n02 r1c3n01 r1c3n02 "
     "r2c3n01 r2c3n02",
     NULL, O_SAME},
    {"a[1-2]b[3-4]c[5-6]d[7-8]",
     "a1b3c5d7 a1b3c5d8 a2b3c5d7 a2b3c5d8 a1b4c5d7 a1b4c5d8 a2b4c5d7 a2b4c5d8 "
     "a1b3c6d7 a1b3c6d8 a2b3c6d7 a2b3c6d8 a1b4c6d7 a1b4c6d8 a2b4c6d7 a2b4c6d8",
     NULL, O_SAME},
    /* text after the last group (newer Slurm; 22.05 rejects) */
    {"n[1-3]x", "n1x n2x n3x", NULL, O_SUFFIX},
    {"gpu-a[1-2]-ib", "gpu-a1-ib gpu-a2-ib", NULL, O_SUFFIX},
    {"n[9-10]x", "n9x n10x", NULL, O_SUFFIX},
    {"n[1-2].x", "n1.x n2.x", NULL, O_SUFFIX},
    {"n[1-2]-", "n1- n2-", NULL, O_SUFFIX},
    {"[01-02]x", "01x 02x", NULL, O_SUFFIX},
    {"n[1-2]x[3-4]y", "n1x3y n1x4y n2x3y n2x4y", NULL, O_SUFFIX},
    {"n[1-2]_ib,m[3]-e", "n1_ib n2_ib m3-e", NULL, O_SUFFIX},
    {"r[1-2]c[1-2]n[1-2]-ib",
     "r1c1n1-ib r1c1n2-ib r2c1n1-ib r2c1n2-ib r1c2n1-ib r1c2n2-ib r2c2n1-ib r2c2n2-ib", NULL,
     O_SUFFIX},

    /* malformed */
    {"n[3-1]", NULL, "backwards", O_SAME},
    {"n[10-9]", NULL, "backwards", O_SAME},
    {"n[]", NULL, "empty brackets", O_SAME},
    {"n[]x", NULL, "empty brackets", O_SAME},
    {"n[a-b]", NULL, "not a digit", O_SAME},
    {"n[1-2a]", NULL, "not a digit", O_SAME},
    {"n[1x2]", NULL, "not a digit", O_SAME},
    {"n[1-2 ]", NULL, "not a digit", O_SAME},
    {"n[1-[2]]", NULL, "nested", O_SAME},
    {"n[1-2]]", NULL, "without a matching", O_SAME},
    {"n[1-2]]x", NULL, "without a matching", O_SAME},
    {"n[1-2-3]", NULL, "more than one '-'", O_SAME},
    {"n[1--2]", NULL, "more than one '-'", O_SAME},
    {"n[-2]", NULL, "no low bound", O_SAME},
    {"n[,1]", NULL, "empty item", O_SAME},
    {"n[1,]", NULL, "empty item", O_SAME},
    {"n[1,,2]", NULL, "empty item", O_SAME},
    {"n[1-2,]", NULL, "empty item", O_SAME},
    {"n[0-65536]", NULL, "per range", O_SAME},
    {"bad[1-", NULL, "never closed", O_QUIRK},
    {"n[1", NULL, "never closed", O_QUIRK},
    {"n[1-2", NULL, "never closed", O_QUIRK},
    {"n[1,2", NULL, "never closed", O_QUIRK},
    {"n[", NULL, "never closed", O_QUIRK},
    {"[", NULL, "never closed", O_QUIRK},
    {"n[1-2]x[", NULL, "never closed", O_QUIRK},
    {"n[[1-2]", NULL, "nested", O_QUIRK},
    {"n1]", NULL, "without a matching", O_QUIRK},
    {"n]", NULL, "without a matching", O_QUIRK},
    {"]", NULL, "without a matching", O_QUIRK},
    {"n[1a-2]", NULL, "not a digit", O_QUIRK},
    {"n[ 1-2]", NULL, "not a digit", O_QUIRK},
    {"n[1 -2]", NULL, "not a digit", O_QUIRK},
    {"n[+1-2]", NULL, "not a digit", O_QUIRK},
    {"n[1-]", NULL, "no high bound", O_QUIRK},
    {"n[1234567890123456789]", NULL, "more than 18 digits", O_LIMIT},
    {"n[1-65536],x", NULL, "more than 65536 hosts", O_LIMIT},
    {"a[1-300]b[1-300]", NULL, "more than 65536 hosts", O_LIMIT},
    {"n\001", NULL, "not allowed", O_LIMIT},
    {"n\xc3\xa9", NULL, "not allowed", O_LIMIT},
};

#define HL_NCASES ((int)(sizeof HL_CASES / sizeof HL_CASES[0]))

#endif
