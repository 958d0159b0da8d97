/*
 * comm_mpi.c - the OpenMPI backend: MPI-3 non-blocking collectives on a duplicate of
 * MPI_COMM_WORLD whose errors come back as return codes (MPI_ERRORS_RETURN).
 *
 * MPI_Init is called only when comm.c has established that an MPI launcher (mpirun or
 * `srun --mpi=pmix`) started this process: elsewhere OpenMPI's MPI_Init aborts with a banner.
 * Never waits itself except through ddp_comm_poll; deadlines and the fatal path are comm.c's.
 */
#include "ddp_build.h"

#if HAVE_MPI

#include <mpi.h>
#include <stdlib.h>

#include "comm/comm_impl.h"
#include "dist/world.h"
#include "core/util.h"

struct mpi_state {
    MPI_Comm comm;        /* our duplicate of MPI_COMM_WORLD */
    int initialized_here; /* we called MPI_Init, so we call MPI_Finalize */
};

struct mpi_req {
    MPI_Request req;
};

static MPI_Comm comm_of(ddp_comm *c)
{
    return ((struct mpi_state *)c->impl)->comm;
}
static MPI_Request *req_of(struct ddp_comm_req *r)
{
    return &((struct mpi_req *)r->priv)->req;
}

/* Describe MPI error rc of call in err; returns -1. */
static int mpi_err(int rc, const char *call, char *err, size_t errlen)
{
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, s, &len) != MPI_SUCCESS)
        len = 0;
    s[len < MPI_MAX_ERROR_STRING ? len : MPI_MAX_ERROR_STRING - 1] = '\0';
    return ddp_err(err, errlen, "%s: %s", call, len ? s : "unknown MPI error");
}

static MPI_Datatype mpi_type(enum ddp_dtype t)
{
    switch (t) {
    case DDP_F32:
        return MPI_FLOAT;
    case DDP_F64:
        return MPI_DOUBLE;
    case DDP_I64:
        return MPI_INT64_T;
    }
    return MPI_DATATYPE_NULL; /* comm.c validated t */
}

static int mpi_iallreduce(ddp_comm *c, struct ddp_comm_req *r, void *buf, size_t n,
                          enum ddp_dtype t, enum ddp_comm_op op, char *err, size_t errlen)
{
    const int rc = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, mpi_type(t),
                                  op == DDP_OP_MAX ? MPI_MAX : MPI_SUM, comm_of(c), req_of(r));
    return rc == MPI_SUCCESS ? 0 : mpi_err(rc, "MPI_Iallreduce", err, errlen);
}

static int mpi_ibroadcast(ddp_comm *c, struct ddp_comm_req *r, void *buf, size_t bytes, int root,
                          char *err, size_t errlen)
{
    const int rc = MPI_Ibcast(buf, (int)bytes, MPI_BYTE, root, comm_of(c), req_of(r));
    return rc == MPI_SUCCESS ? 0 : mpi_err(rc, "MPI_Ibcast", err, errlen);
}

static int mpi_ibarrier(ddp_comm *c, struct ddp_comm_req *r, char *err, size_t errlen)
{
    const int rc = MPI_Ibarrier(comm_of(c), req_of(r));
    return rc == MPI_SUCCESS ? 0 : mpi_err(rc, "MPI_Ibarrier", err, errlen);
}

static int mpi_iallgather(ddp_comm *c, struct ddp_comm_req *r, const void *send, void *recv,
                          size_t bytes, char *err, size_t errlen)
{
    /* MPI forbids aliased buffers: the in-place form says so explicitly. */
    const void *s = send == (char *)recv + (size_t)c->rank * bytes ? MPI_IN_PLACE : send;
    const int rc =
        MPI_Iallgather(s, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, comm_of(c), req_of(r));
    return rc == MPI_SUCCESS ? 0 : mpi_err(rc, "MPI_Iallgather", err, errlen);
}

static int test_request(MPI_Request *req, char *err, size_t errlen)
{
    int flag = 0;
    const int rc = MPI_Test(req, &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS)
        return mpi_err(rc, "MPI_Test", err, errlen);
    return flag ? 1 : 0;
}

static int mpi_test(ddp_comm *c, struct ddp_comm_req *r, char *err, size_t errlen)
{
    return test_request(req_of(r), err, errlen);
}

static int test_request_arg(void *arg, char *err, size_t errlen)
{
    return test_request(arg, err, errlen);
}

static void mpi_destroy(ddp_comm *c)
{
    struct mpi_state *st = c->impl;
    if (!st)
        return;
    MPI_Comm_free(&st->comm);
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (st->initialized_here && !finalized)
        MPI_Finalize();
    free(st);
    c->impl = NULL;
}

static void mpi_abort(ddp_comm *c, int code)
{
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (initialized && !finalized)
        MPI_Abort(MPI_COMM_WORLD, code);
}

static const struct ddp_comm_ops mpi_ops = {
    .name = "mpi",
    .req_size = sizeof(struct mpi_req),
    .iallreduce = mpi_iallreduce,
    .ibroadcast = mpi_ibroadcast,
    .ibarrier = mpi_ibarrier,
    .iallgather = mpi_iallgather,
    .test = mpi_test,
    .destroy = mpi_destroy,
    .abort = mpi_abort,
};

int ddp_comm_mpi_init(ddp_comm *c, const struct ddp_world *w, char *err, size_t errlen)
{
    int initialized = 0, finalized = 0, rc;
    MPI_Finalized(&finalized);
    if (finalized)
        return ddp_err(err, errlen, "internal error: MPI was already finalized");
    MPI_Initialized(&initialized);
    struct mpi_state *st = ddp_calloc(1, sizeof *st);
    st->comm = MPI_COMM_NULL;
    if (!initialized) {
#ifdef OPEN_MPI
        /* Open MPI's libnbc runs every in-place MPI_Iallreduce (ours all are) as a binomial
         * reduce + broadcast, at a third of the bandwidth of MPI_Allreduce; its ring is
         * bandwidth-optimal for gradient buckets (1 MiB f32 on 2 ranks here: ~95 us against
         * ~290 us, docs/comm.md). A setting of the user's own wins. */
        setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "1", 0);
#endif
        int provided = 0;
        /* Only the creating thread calls MPI; the data loader's threads never do. */
        rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
        if (rc != MPI_SUCCESS) {
            free(st);
            return mpi_err(rc, "MPI_Init_thread", err, errlen);
        }
        st->initialized_here = 1;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);

    int mrank = -1, msize = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &mrank);
    MPI_Comm_size(MPI_COMM_WORLD, &msize);
    if (mrank != w->rank || msize != w->world_size) {
        /* MPI stays initialised: finalising needs every rank, and the caller exits now. */
        free(st);
        return ddp_err(err, errlen,
                       "MPI says this is rank %d of %d, but the launcher's environment says "
                       "rank %d of %d: were the tasks started by two launchers?",
                       mrank, msize, w->rank, w->world_size);
    }

    /* A duplicate keeps our traffic apart from other MPI users; the dup itself is a
     * collective, so it waits under the deadline too. */
    MPI_Request req = MPI_REQUEST_NULL;
    rc = MPI_Comm_idup(MPI_COMM_WORLD, &st->comm, &req);
    if (rc != MPI_SUCCESS) {
        free(st);
        return mpi_err(rc, "MPI_Comm_idup", err, errlen);
    }
    char msg[256] = "";
    rc = ddp_comm_poll(c->timeout_s, test_request_arg, &req, msg, sizeof msg);
    if (rc != 1) {
        free(st);
        if (rc == 0)
            return ddp_err(err, errlen,
                           "MPI_Comm_idup did not complete within %g s: a rank of %d may not "
                           "have started",
                           c->timeout_s, msize);
        return ddp_err(err, errlen, "%s", msg);
    }
    MPI_Comm_set_errhandler(st->comm, MPI_ERRORS_RETURN);

    c->ops = &mpi_ops;
    c->impl = st;
    return 0;
}

#else
typedef int ddp_comm_mpi_unused; /* ISO C forbids an empty translation unit */
#endif
