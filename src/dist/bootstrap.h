/*
 * bootstrap.h - "publish from rank 0, every rank receives": a few bytes (the NCCL unique id,
 * 128 bytes) that rank 0 makes and every other rank needs before any communicator exists.
 *
 * Three ways, chosen by [dist] bootstrap (auto | pmi2 | mpi | tcp):
 *  pmi2  Slurm's PMI2 key-value store (libpmi2, `srun --mpi=pmi2`). Live only when PMI_FD is
 *        set: without it PMI2_Init succeeds as a one-rank singleton and Put/Fence fail. Rank 0
 *        puts the blob hex-encoded (no ';', which PMI2 truncates at) in chunks of at most
 *        DDP_BOOTSTRAP_PMI2_CHUNK bytes (1022 hex characters; values up to 1023 bytes
 *        round-trip) under keys "ddp-JOB.STEP-SEQ-I"; every rank fences, then gets them.
 *        Built only where HAVE_PMI2 (ddp_build.h); elsewhere asking for it is an error.
 *  mpi   a broadcast from rank 0 that the caller offers (struct ddp_bootstrap_bcast: the
 *        MPI communicator's, comm/comm.h ddp_comm_bootstrap_bcast); its own deadline applies,
 *        and a failure there is the comm layer's fatal path (exit 5), not a return. This
 *        module knows nothing of communicators: it only calls the function it is given.
 *  tcp   A rendezvous served by rank 0 on master_port (all addresses), which every other rank
 *        reaches at master_addr:master_port:
 *          - rank 0 binds with SO_REUSEADDR; a port already taken is the one-line error
 *            "port P on HOST is in use: another job? set [dist] port or MASTER_PORT";
 *          - each peer connects (non-blocking, retried with backoff while refused or
 *            unreachable, until the deadline) and says hello: magic, protocol version, the
 *            job token, its rank, the world size, the blob length and the call's sequence
 *            number; rank 0 answers with the blob, or a refusal the peer turns into one line;
 *          - the job token keeps strangers out (another job on the same port is refused and
 *            told so; rank 0 only warns and goes on waiting): DDP_BOOTSTRAP_TOKEN when set
 *            (`ddptrain launch` sets one per launch), else "slurm:JOB.STEP" under Slurm
 *            ("slurm:JOB" under mpirun), else "world:SIZE@ADDR:PORT";
 *          - rank 0 waits for all world_size - 1 peers to take the blob and acknowledge it,
 *            under the deadline; on expiry the error names the ranks that never came;
 *          - two peers claiming one rank, or a peer of the same job with another world size
 *            or length, stop rank 0 at once (the launch is wrong, waiting cannot fix it).
 *        Every socket is non-blocking and every wait is a poll() bounded by the deadline.
 *  auto  decided once, before any communicator exists, by ddp_bootstrap_decide: pmi2 when
 *        built and PMI_FD is set (srun --mpi=pmi2); else mpi when MPI started this process
 *        (mpirun, or srun --mpi=pmix: ddp_world's mpi_launched) and this ddptrain has MPI, so
 *        the caller makes the MPI communicator that carries the id; else tcp. The caller
 *        passes the decided kind on; ddp_bootstrap_choose resolves a stray `auto` as before
 *        (pmi2, else mpi when a broadcast is offered, else tcp).
 * A world of one rank returns at once, whatever the kind: there is nobody to tell.
 *
 * Every rank calls ddp_bootstrap_share the same number of times in the same order (calls are
 * numbered; a rank that is out of step is refused). rank 0's blob is left as it is; on the
 * others it is overwritten only on success.
 *
 * What it does not do: make the blob, create communicators, retry after a failure (a failed
 * or timed-out call leaves PMI2 or a socket in an unknown state: the caller exits 4), print
 * anything except ddp_warn notes (a refused stranger, a master address that is not rank 0's).
 * Reads PMI_FD, PMI_RANK and DDP_BOOTSTRAP_TOKEN from the process environment
 * (ddp_bootstrap_decide reads PMI_FD and SLURM_MPI_TYPE through the accessor it is given). Allocates
 * nothing that outlives a call, except PMI2's own state until ddp_bootstrap_finalize.
 */
#ifndef DDP_LAUNCH_BOOTSTRAP_H
#define DDP_LAUNCH_BOOTSTRAP_H

#include <stddef.h>

#include "dist/world.h"

/* [dist] bootstrap; ddp_bootstrap_names holds the job file's words, in this order. */
enum ddp_bootstrap_kind {
    DDP_BOOTSTRAP_AUTO,
    DDP_BOOTSTRAP_PMI2,
    DDP_BOOTSTRAP_MPI,
    DDP_BOOTSTRAP_TCP,
    DDP_BOOTSTRAP_COUNT
};
extern const char *const ddp_bootstrap_names[DDP_BOOTSTRAP_COUNT];

/* A broadcast from rank 0 to every rank that an existing collective offers the bootstrap
 * (kind mpi). fn NULL: there is a communicator but it cannot carry the blob (why_not says
 * why, e.g. "the communicator is not MPI"). */
struct ddp_bootstrap_bcast {
    void (*fn)(void *ctx, void *buf, size_t len);
    void *ctx;
    int rank, size; /* of the collective: checked against the world */
    const char *why_not;
};

/* Largest blob: an NCCL id is 128 bytes; 64 KiB leaves room for other small startup data
 * and keeps the PMI2 store below 65 chunk keys. */
#define DDP_BOOTSTRAP_MAX_LEN 65536
/* Bytes of blob per PMI2 value: 511 bytes are 1022 hex characters, the most that fits a
 * PMI2 value (1024 bytes with its NUL; 1023 were seen to round-trip, 1022 keeps a margin). */
#define DDP_BOOTSTRAP_PMI2_CHUNK 511
/* Longest job token compared by the TCP rendezvous. */
#define DDP_BOOTSTRAP_TOKEN_MAX 127

/* "auto" | "pmi2" | "mpi" | "tcp" -> *out. Returns 0, or -1 with one line in err. */
int ddp_bootstrap_parse(const char *s, enum ddp_bootstrap_kind *out, char *err, size_t errlen);
const char *ddp_bootstrap_name(enum ddp_bootstrap_kind k); /* "auto", "pmi2", "mpi", "tcp" */

/* 1 when PMI2 is built in and PMI_FD says this process was started by srun --mpi=pmi2. */
int ddp_bootstrap_pmi2_live(void);

/* The way asked takes in world w, and why, in one line for rank 0's log ("srun --mpi=pmi2
 * started this process (PMI_FD is set)"). auto as described above; pmi2_built and mpi_built
 * are what this build has (HAVE_PMI2, HAVE_MPI: arguments so that a test can try every
 * build); env reads PMI_FD (getenv when NULL). Any other kind is returned as is ("[dist]
 * bootstrap = tcp"); a world of one rank shares nothing: auto returns tcp, which returns at
 * once. */
enum ddp_bootstrap_kind ddp_bootstrap_decide(enum ddp_bootstrap_kind asked,
                                             const struct ddp_world *w, ddp_env_fn env, void *ctx,
                                             int pmi2_built, int mpi_built, char *why,
                                             size_t whylen);

/* 1 when ddp_bootstrap_decide, for this process and this build, says mpi: the caller then
 * makes the MPI communicator whose broadcast carries the id. why as above (may be NULL). */
int ddp_bootstrap_wants_mpi(enum ddp_bootstrap_kind asked, const struct ddp_world *w, char *why,
                            size_t whylen);

/* The kind `auto` resolves to for this process, given the broadcast on offer (any other
 * kind is returned as is). */
enum ddp_bootstrap_kind ddp_bootstrap_choose(enum ddp_bootstrap_kind kind,
                                             const struct ddp_bootstrap_bcast *bcast);

/* Publish rank 0's len bytes at blob to every rank of w (see above). bcast: the broadcast an
 * existing collective offers (NULL when none exists yet; required for kind mpi). timeout_s
 * bounds every wait of pmi2 and tcp. Returns 0, or -1 with one line in err naming the way, the peer or rank and the fix
 * (caller exits DDP_EXIT_LAUNCH). */
int ddp_bootstrap_share(const struct ddp_world *w, enum ddp_bootstrap_kind kind,
                        const struct ddp_bootstrap_bcast *bcast, void *blob, size_t len,
                        double timeout_s, char *err, size_t errlen);

/* Release PMI2 (PMI2_Finalize) if a share used it; a no-op otherwise. Call once at exit. */
void ddp_bootstrap_finalize(void);

#endif
