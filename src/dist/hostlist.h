/*
 * hostlist.h - the Slurm hostlist grammar and Slurm's compressed count lists, expanded.
 *
 * What it does
 *  - ddp_hostlist_expand turns an expression such as "gpu[01-04,07],login1 rack[1-2]-n[3-4]"
 *    into the list of host names, in the order `scontrol show hostnames` prints them:
 *      * tokens are separated by ',', ' ', '\t' or '\n' outside brackets; empty tokens are
 *        skipped (as Slurm does: ",a,,b," is a b); an empty expression gives zero hosts;
 *      * a bracket group holds numbers and ranges separated by ','  ("n[1-3,5]"); a range is
 *        low-high with low <= high; digits only (no sign, no blank);
 *      * zero padding comes from the low bound: "n[01-2]" is n01 n02, "n[9-11]" is n9 n10 n11,
 *        "n[008-010]" is n008 n009 n010; each range of a group keeps its own width;
 *      * text may follow the last group ("n[1-3]x", "gpu-a[1-2]-ib"), as newer Slurm accepts
 *        (22.05 rejects it);
 *      * several groups in one name give their cartesian product in the order Slurm itself
 *        produces: with groups G1..Gk (left to right) the loops nest, outermost first,
 *        G(k-1), G(k-2), ..., G1, Gk. Two groups: leftmost slowest (rack1-n3 rack1-n4
 *        rack2-n3 ...); three groups "r[1-2]c[1-3]n[01-02]": c slowest, then r, then n;
 *      * order and duplicates are kept ("a[1,1,2]" is a1 a1 a2); nothing is sorted.
 *  - ddp_hostlist_expand_counts turns Slurm's compressed count lists
 *    (SLURM_STEP_TASKS_PER_NODE, SLURM_TASKS_PER_NODE, SLURM_JOB_CPUS_PER_NODE) such as
 *    "4(x2),3" into 4 4 3.
 *
 * Rejected, with one line in err that quotes the token, says what was expected and how to
 * fix it: unclosed or unmatched brackets ("bad[1-", "n1]"), nested brackets, empty groups or
 * empty range items ("n[]", "n[1,,2]"), non-digits in a group ("n[a-b]", "n[+1]", "n[ 1]"),
 * backward ranges ("n[3-1]"), open ranges ("n[1-]"), control or non-ASCII characters, and
 * anything over the limits below. Slurm 22.05 turns several of these into garbage names
 * ("bad[1-" gives "bad]"); we never guess.
 *
 * What it does not do: sort, de-duplicate, compress a list back into an expression, resolve
 * names, or read the environment.
 *
 * Ownership: on success *hosts is an array of *count strings, all owned by the caller and
 * released with ddp_hostlist_free; *counts from ddp_hostlist_expand_counts is released with
 * free(). On failure nothing is allocated and the outputs are NULL / 0. The input is never
 * modified (parsing works on a private copy). Allocation failure dies (util.h).
 */
#ifndef DDP_LAUNCH_HOSTLIST_H
#define DDP_LAUNCH_HOSTLIST_H

#include <stddef.h>

/* Longest host name produced: DNS allows 253 characters; 255 fits a 256-byte buffer
 * (DDP_HOST_MAX in world.h) with its terminating NUL. */
#define DDP_HOSTLIST_NAME_MAX 255
/* Most hosts in one expansion: the largest Slurm clusters have tens of thousands of nodes;
 * the cap bounds memory (at most 64 Ki names of <= 256 bytes, 16 MiB) on hostile input. */
#define DDP_HOSTLIST_MAX_HOSTS 65536
/* Most numbers in one range "lo-hi": the same bound Slurm applies (its MAX_RANGE). */
#define DDP_HOSTLIST_MAX_RANGE 65536
/* Longest expression accepted: Slurm nodelists in the environment are compressed and far
 * shorter; a megabyte means a wrong variable, not a cluster. */
#define DDP_HOSTLIST_EXPR_MAX (1 << 20)
/* Most digits in one number of a range: keeps every value exact in int64. */
#define DDP_HOSTLIST_DIGITS_MAX 18
/* Largest value in a count list (tasks or CPUs per node): far above any node's core count,
 * small enough that sums of DDP_HOSTLIST_MAX_HOSTS entries stay exact. */
#define DDP_HOSTLIST_COUNT_MAX (1 << 20)

/* Expand expr. Returns 0 with *hosts / *count set (count may be 0 for a blank expression),
 * or -1 with one line in err (may be NULL). */
int ddp_hostlist_expand(const char *expr, char ***hosts, int *count, char *err, size_t errlen);

/* Free what ddp_hostlist_expand returned; accepts NULL. */
void ddp_hostlist_free(char **hosts, int count);

/* Expand a Slurm count list: comma-separated items "N" or "N(xR)" (N repeated R times,
 * R >= 1), 0 <= N <= DDP_HOSTLIST_COUNT_MAX, at most DDP_HOSTLIST_MAX_HOSTS entries in all.
 * Blanks are allowed only around the whole list; empty items are errors (Slurm never writes
 * them). Returns 0 with *counts (caller frees) and *n >= 1, or -1 with one line in err. */
int ddp_hostlist_expand_counts(const char *expr, int **counts, int *n, char *err, size_t errlen);

#endif
