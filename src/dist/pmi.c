/*
 * pmi.c - the PMI2 way of the bootstrap (bootstrap.h): Slurm's key-value store under
 * `srun --mpi=pmi2`. Rank 0 puts the blob's length and its hex chunks, every rank fences,
 * the others get and decode them.
 *
 * libpmi2's calls block on PMI_FD without any bound. To keep the deadline, they run on a
 * helper thread while the caller waits on a condition variable with a timeout; on expiry the
 * caller returns the error (and exits 4) and the helper, still blocked inside libpmi2, is
 * abandoned: it owns its own copy of everything it touches, and PMI2 is marked unusable.
 * Leaves the choice of PMI2 (PMI_FD present) to bootstrap.c.
 */
#include "dist/bootstrap_impl.h"

#if HAVE_PMI2

#include <pthread.h>
#include <slurm/pmi2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/util.h"

/* PMI2 state of the process: initialised once, used by one call at a time. */
static int g_inited;      /* PMI2_Init succeeded */
static int g_broken;      /* a call was abandoned inside libpmi2: never use it again */
static char g_jobid[256]; /* PMI2_Job_GetId, the KVS namespace for gets */

struct pmi_call {
    /* inputs, copied: the helper may outlive the caller's frame */
    int rank, size;
    long long job, step;
    unsigned seq;
    size_t len;
    unsigned char *data; /* len bytes: rank 0's blob in, everyone's result out */
    /* result */
    int rc;
    char msg[DDP_ERR_LEN];
    /* hand-over */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done, abandoned;
};

static void call_free(struct pmi_call *c)
{
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c->data);
    free(c);
}

/* KVS key of chunk i of call seq ("len" for the length key). */
static void key_of(const struct pmi_call *c, const char *what, char *key, size_t keylen)
{
    snprintf(key, keylen, "ddp-%lld.%lld-%u-%s", c->job, c->step, c->seq, what);
}

/* The PMI2 exchange itself, on the helper thread. Returns 0 or -1 with c->msg. */
static int exchange(struct pmi_call *c)
{
    char key[PMI2_MAX_KEYLEN], val[PMI2_MAX_VALLEN], what[32];
    const size_t nchunks = (c->len + DDP_BOOTSTRAP_PMI2_CHUNK - 1) / DDP_BOOTSTRAP_PMI2_CHUNK;
    int rc;
    if (!g_inited) {
        int spawned = 0, size = 0, rank = 0, appnum = 0;
        if ((rc = PMI2_Init(&spawned, &size, &rank, &appnum)) != PMI2_SUCCESS)
            return ddp_err(c->msg, sizeof c->msg,
                           "PMI2_Init failed (code %d); start with "
                           "srun --mpi=pmi2 or use bootstrap = tcp",
                           rc);
        if ((rc = PMI2_Job_GetId(g_jobid, sizeof g_jobid)) != PMI2_SUCCESS)
            return ddp_err(c->msg, sizeof c->msg, "PMI2_Job_GetId failed (code %d)", rc);
        g_inited = 1;
        if (size != c->size || rank != c->rank)
            return ddp_err(c->msg, sizeof c->msg,
                           "PMI2 says rank %d of %d but the launcher "
                           "says rank %d of %d: PMI_FD belongs to another launch; unset PMI_* "
                           "or use bootstrap = tcp",
                           rank, size, c->rank, c->size);
    }
    if (c->rank == 0) {
        char lenval[32];
        snprintf(lenval, sizeof lenval, "%zu", c->len);
        key_of(c, "len", key, sizeof key);
        if ((rc = PMI2_KVS_Put(key, lenval)) != PMI2_SUCCESS)
            return ddp_err(c->msg, sizeof c->msg, "PMI2_KVS_Put(%s) failed (code %d)", key, rc);
        for (size_t i = 0; i < nchunks; i++) {
            size_t off = i * DDP_BOOTSTRAP_PMI2_CHUNK;
            size_t n =
                c->len - off < DDP_BOOTSTRAP_PMI2_CHUNK ? c->len - off : DDP_BOOTSTRAP_PMI2_CHUNK;
            snprintf(what, sizeof what, "%zu", i);
            key_of(c, what, key, sizeof key);
            ddp_bootstrap_hex_encode(c->data + off, n, val);
            if ((rc = PMI2_KVS_Put(key, val)) != PMI2_SUCCESS)
                return ddp_err(c->msg, sizeof c->msg, "PMI2_KVS_Put(%s) failed (code %d)", key, rc);
        }
    }
    if ((rc = PMI2_KVS_Fence()) != PMI2_SUCCESS)
        return ddp_err(c->msg, sizeof c->msg,
                       "PMI2_KVS_Fence failed (code %d); a task of the "
                       "step may have died",
                       rc);
    if (c->rank == 0)
        return 0;
    int vlen = 0;
    key_of(c, "len", key, sizeof key);
    if ((rc = PMI2_KVS_Get(g_jobid, PMI2_ID_NULL, key, val, sizeof val, &vlen)) != PMI2_SUCCESS)
        return ddp_err(c->msg, sizeof c->msg,
                       "PMI2_KVS_Get(%s) failed (code %d): rank 0 "
                       "published nothing; do all ranks run the same program?",
                       key, rc);
    int64_t theirs;
    if (ddp_parse_i64(val, &theirs) < 0 || theirs != (int64_t)c->len)
        return ddp_err(c->msg, sizeof c->msg,
                       "rank 0 published %.20s bytes through PMI2, this "
                       "rank expects %zu; the ranks run different programs or versions",
                       val, c->len);
    for (size_t i = 0; i < nchunks; i++) {
        size_t off = i * DDP_BOOTSTRAP_PMI2_CHUNK;
        size_t n =
            c->len - off < DDP_BOOTSTRAP_PMI2_CHUNK ? c->len - off : DDP_BOOTSTRAP_PMI2_CHUNK;
        snprintf(what, sizeof what, "%zu", i);
        key_of(c, what, key, sizeof key);
        if ((rc = PMI2_KVS_Get(g_jobid, PMI2_ID_NULL, key, val, sizeof val, &vlen)) != PMI2_SUCCESS)
            return ddp_err(c->msg, sizeof c->msg, "PMI2_KVS_Get(%s) failed (code %d)", key, rc);
        if (vlen != (int)(2 * n) || ddp_bootstrap_hex_decode(val, c->data + off, n) < 0)
            return ddp_err(c->msg, sizeof c->msg,
                           "PMI2 value of %s is not %zu hex digits "
                           "(got %d characters); the key-value store mangled it",
                           key, 2 * n, vlen);
    }
    return 0;
}

static void *helper(void *arg)
{
    struct pmi_call *c = arg;
    int rc = exchange(c);
    pthread_mutex_lock(&c->mu);
    c->rc = rc;
    c->done = 1;
    int orphan = c->abandoned;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
    if (orphan)
        call_free(c);
    return NULL;
}

int ddp_bootstrap_pmi2(const struct ddp_world *w, unsigned seq, void *blob, size_t len,
                       double timeout_s, char *err, size_t errlen)
{
    if (g_broken)
        return ddp_err(err, errlen, "PMI2 is unusable after an earlier bootstrap timed out");
    struct pmi_call *c = ddp_calloc(1, sizeof *c);
    c->rank = w->rank;
    c->size = w->world_size;
    c->job = (long long)w->job_id;
    c->step = (long long)w->step_id;
    c->seq = seq;
    c->len = len;
    c->data = ddp_malloc(len);
    memcpy(c->data, blob, len);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&c->mu, NULL);

    pthread_t th;
    pthread_attr_t ta;
    pthread_attr_init(&ta);
    pthread_attr_setdetachstate(&ta, PTHREAD_CREATE_DETACHED);
    int prc = pthread_create(&th, &ta, helper, c);
    pthread_attr_destroy(&ta);
    if (prc != 0) {
        call_free(c);
        return ddp_err(err, errlen, "cannot start the PMI2 helper thread: %s", strerror(prc));
    }

    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += (time_t)timeout_s;
    until.tv_nsec += (long)((timeout_s - (double)(time_t)timeout_s) * 1e9);
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&c->mu);
    while (!c->done)
        if (pthread_cond_timedwait(&c->cv, &c->mu, &until) != 0 && !c->done)
            break; /* ETIMEDOUT (EINTR is not returned) */
    if (!c->done) {
        c->abandoned = 1;
        g_broken = 1;
        pthread_mutex_unlock(&c->mu);
        return ddp_err(err, errlen,
                       "PMI2 bootstrap did not complete within %g s (rank %d of "
                       "%d): a task of the step never reached it or died; check the other "
                       "ranks' errors",
                       timeout_s, w->rank, w->world_size);
    }
    pthread_mutex_unlock(&c->mu);
    int rc = c->rc;
    if (rc == 0)
        memcpy(blob, c->data, len);
    else
        ddp_err(err, errlen, "%s", c->msg);
    call_free(c);
    return rc;
}

void ddp_bootstrap_pmi2_finalize(void)
{
    if (g_inited && !g_broken) {
        PMI2_Finalize();
        g_inited = 0;
    }
}

#else
/* Built without libpmi2: bootstrap.c never calls in here. */
typedef int ddp_pmi_unused;
#endif
