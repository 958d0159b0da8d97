/*
 * train.c - the trainer's setup and teardown: job, world, comm, data, model, weights, output,
 * the banner, `check`'s and eval's entries, the report at the end. The epoch loop is
 * train_loop.c's. See train.h.
 *
 * Dimension letters: B per-rank batch, G global batch (B x W), W world size, K classes.
 */
#include "train/train_impl.h"

static void log_line(const char *line)
{
    ddp_log("%s", line);
}

/* The convolution algorithms the model's build chose, a log line each (GPU with cuDNN). */
static void log_conv_algorithms(void)
{
    char rep[16384];
    if (ddp_backend_conv_report(rep, sizeof rep) == 0)
        return;
    for (char *sv = NULL, *line = strtok_r(rep, "\n", &sv); line; line = strtok_r(NULL, "\n", &sv))
        ddp_log("  conv %s", line);
}

const char *trainer_host_of(const struct trainer *t, int rank)
{
    return t->hosts ? t->hosts + (size_t)rank * HOST_FIELD : "?";
}

/* Compute threads for this rank: [train] threads, else SLURM_CPUS_PER_TASK, else the cores
 * this process may run on divided among the ranks of this node (unless the launcher already
 * bound the process to fewer cores than the node has). */
static int choose_threads(const struct ddp_job *job, const struct ddp_world *w)
{
    if (job->threads > 0)
        return (int)job->threads;
    return ddp_world_default_threads(w);
}

/* All ranks agree on setup: returns 0 if every rank succeeded; else prints who failed and
 * returns the exit code of the lowest failing rank. */
int trainer_agree(struct trainer *t, int code, const char *msg)
{
    int first;
    int rc = ddp_comm_agree(t->comm, code, &first);
    if (code != 0)
        ddp_warn("%s", msg);
    else if (first >= 0 && t->world.rank == 0)
        ddp_warn("stopping: rank %d on %s failed during setup (see its message above)", first,
                 trainer_host_of(t, first));
    return rc;
}

/* [data] val, [data] normalize and augment against the samples' shape. */
static int open_val(struct trainer *t, size_t cache, char *err, size_t errlen)
{
    const struct ddp_job *job = &t->job;
    int64_t a[3], b[3];
    int na = ddp_h5split_shape(t->train, a);
    if (ddp_recipe_check_data(job, na, na == 3 ? (int)a[0] : 1, err, errlen) != 0)
        return DDP_EXIT_USAGE;
    if (!job->data_val[0])
        return 0;
    t->val = ddp_h5split_open(job->data_file, job->data_val, err, errlen);
    if (!t->val || ddp_h5split_cache(t->val, cache, err, errlen) < 0) {
        char where[DDP_PATH_MAX + 64];
        size_t n = strlen(err);
        snprintf(err + n, errlen - n, " (from %s)",
                 ddp_job_where(job, "data", "val", where, sizeof where));
        return DDP_EXIT_DATA;
    }
    int nb = ddp_h5split_shape(t->val, b);
    if (na != nb || memcmp(a, b, sizeof(int64_t) * (size_t)na) != 0) {
        ddp_err(err, errlen, "%s: %s and %s hold samples of different shapes", job->data_file,
                job->data_train, job->data_val);
        return DDP_EXIT_DATA;
    }
    return 0;
}

static int open_data(struct trainer *t, char *err, size_t errlen)
{
    const struct ddp_job *job = &t->job;
    t->train = ddp_h5split_open(job->data_file, job->data_train, err, errlen);
    if (!t->train)
        return DDP_EXIT_DATA;
    size_t cache = (size_t)job->cache_mb << 20;
    if (ddp_h5split_cache(t->train, cache, err, errlen) < 0)
        return DDP_EXIT_DATA;
    if (job->data_test[0]) {
        t->test = ddp_h5split_open(job->data_file, job->data_test, err, errlen);
        if (!t->test)
            return DDP_EXIT_DATA;
        if (ddp_h5split_cache(t->test, cache, err, errlen) < 0)
            return DDP_EXIT_DATA;
        int64_t a[3], b[3];
        int na = ddp_h5split_shape(t->train, a), nb = ddp_h5split_shape(t->test, b);
        if (na != nb || memcmp(a, b, sizeof(int64_t) * (size_t)na) != 0) {
            ddp_err(err, errlen, "%s: %s and %s hold samples of different shapes", job->data_file,
                    job->data_train, job->data_test);
            return DDP_EXIT_DATA;
        }
    }
    return open_val(t, cache, err, errlen);
}

static int build_model(struct trainer *t, char *err, size_t errlen)
{
    const struct ddp_job *job = &t->job;
    char where[DDP_PATH_MAX + 64], why[DDP_ERR_LEN];
    int64_t dims[3];
    int nd = ddp_h5split_shape(t->train, dims);
    if (ddp_model_create(&t->model, t->be, job->layers, nd, dims, (int)job->batch_size, why,
                         sizeof why) != 0) {
        char shape[96];
        ddp_err(err, errlen, "%s: %s (samples of %s are %s)",
                ddp_job_where_layers(job, t->model.err_at, where, sizeof where), why,
                job->data_file, ddp_h5split_shape_text(t->train, shape, sizeof shape));
        return DDP_EXIT_USAGE;
    }
    int K = t->model.classes;
    if (ddp_h5split_check_labels(t->train, K, err, errlen) != 0 ||
        (t->test && ddp_h5split_check_labels(t->test, K, err, errlen) != 0) ||
        (t->val && ddp_h5split_check_labels(t->val, K, err, errlen) != 0)) {
        size_t n = strlen(err);
        snprintf(err + n, errlen - n, " (the model's last layer has %d outputs)", K);
        return DDP_EXIT_DATA;
    }
    return 0;
}

static int init_weights(struct trainer *t, char *err, size_t errlen)
{
    ddp_model_init(&t->model, (uint64_t)t->job.seed);
    if (strcmp(t->job.init, "pytorch") == 0 || t->world.rank != 0)
        return 0; /* other ranks receive rank 0's weights */
    if (ddp_weights_load(t->job.init, &t->model, err, errlen) != 0) {
        char where[DDP_PATH_MAX + 64];
        size_t n = strlen(err);
        snprintf(err + n, errlen - n, " (from %s)",
                 ddp_job_where(&t->job, "model", "init", where, sizeof where));
        return DDP_EXIT_DATA;
    }
    return 0;
}

/* Rank 0 creates and locks the output directory; nothing in it changes until commit_output,
 * so a run that fails during setup leaves an earlier run's files as they were. */
static int prepare_output(struct trainer *t, char *err, size_t errlen)
{
    if (t->world.rank != 0 || t->eval_only || t->args.mode == DDP_RUN_PROFILE)
        return 0; /* eval and profile write nothing there */
    char where[DDP_PATH_MAX + 64], why[DDP_ERR_LEN];
    if (t->args.mode == DDP_RUN_CHECK) { /* what the lock would say, touching nothing */
        if (ddp_outdir_probe(t->job.output, why, sizeof why) == 0)
            return 0;
    } else {
        t->lock_fd = ddp_outdir_lock(t->job.output, why, sizeof why);
        if (t->lock_fd >= 0)
            return 0;
    }
    ddp_err(err, errlen, "%s: %s", ddp_job_where(&t->job, "job", "output", where, sizeof where),
            why);
    return DDP_EXIT_USAGE;
}

/* Rank 0, starting afresh: warn when [job] output holds %j and another Slurm job's directory
 * of the same pattern holds a checkpointed run of this job name; a resubmitted job gets a new
 * id, so it cannot find its checkpoints (a requeued one keeps its id and does). */
static void warn_other_jobs(const struct trainer *t)
{
    const struct ddp_job *job = &t->job;
    char other[DDP_PATH_MAX], where[DDP_PATH_MAX + 64];
    int n = ddp_outdir_other_jobs(t->output_pattern, job->name, job->output, other, sizeof other);
    if (n > 0)
        ddp_warn("warning: %s = %s: this job starts afresh in %s while %s%s holds checkpoints of "
                 "job '%s'; %%j is a new id with every sbatch, so a resubmitted job never "
                 "resumes: use a stable output (%%x or a fixed path) for jobs that are "
                 "resubmitted or preempted (slurm/README.md)",
                 ddp_job_where(job, "job", "output", where, sizeof where), t->output_pattern,
                 job->output, other, n > 1 ? " (and others)" : "", job->name);
}

/* Rank 0, once the run is known to start: move an earlier run's files aside when starting
 * afresh, write job.ini, open metrics.jsonl (appended to when resuming). */
static int commit_output(struct trainer *t, char *err, size_t errlen)
{
    const struct ddp_job *job = &t->job;
    char where[DDP_PATH_MAX + 64], why[DDP_ERR_LEN], moved[DDP_PATH_MAX + 64];
    if (!t->resumed) {
        warn_other_jobs(t);
        int rc = ddp_outdir_move_aside(job->output, moved, sizeof moved, why, sizeof why);
        if (rc < 0) {
            ddp_err(err, errlen,
                    "%s: %s; move the earlier run's files away by hand, or use "
                    "another [job] output",
                    ddp_job_where(job, "job", "output", where, sizeof where), why);
            return DDP_EXIT_USAGE;
        }
        if (rc > 0)
            ddp_log("starting afresh: the earlier run's files in %s were moved to %s", job->output,
                    moved);
    }
    /* the directory is ours and its files of the right kind (prepare_output,
     * check_resumed_output): a write that fails now (a full disk) is a runtime failure, exit 1
     * as for every output of every subcommand */
    if (ddp_outdir_write_job(job->output, t->job_text, why, sizeof why) != 0) {
        ddp_err(err, errlen, "%s", why);
        return DDP_EXIT_RUNTIME;
    }
    char path[DDP_PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/metrics.jsonl", job->output);
    if (ddp_metrics_open(&t->metrics, path, t->resumed, job->tensorboard, err, errlen) != 0)
        return DDP_EXIT_RUNTIME;
    return 0;
}

/* Rank 0, resuming: the files a resumed run appends to are of the right kind, as `check` and
 * the run both ask before anything is written. */
static int check_resumed_output(const struct trainer *t, char *err, size_t errlen)
{
    char why[DDP_ERR_LEN], where[DDP_PATH_MAX + 64];
    if (!t->resumed ||
        ddp_outdir_check_resume(t->job.output, t->job.tensorboard, why, sizeof why) == 0)
        return 0;
    ddp_err(err, errlen, "%s: %s", ddp_job_where(&t->job, "job", "output", where, sizeof where),
            why);
    return DDP_EXIT_USAGE;
}

/* Rank 0, after training ended with rc: report.html ([job] report), a warning if it fails. */
static void write_report(struct trainer *t, int rc)
{
    char err[DDP_ERR_LEN + DDP_PATH_MAX];
    if (t->world.rank != 0 || !t->job.report || (rc != 0 && rc != DDP_EXIT_REQUEUE))
        return;
    ddp_metrics_close(&t->metrics); /* the report reads every line */
    const char *dirs[1] = {t->job.output};
    if (ddp_report_write(dirs, 1, err, sizeof err) == 0)
        ddp_log("report: %s/report.html", t->job.output);
    else
        ddp_warn("warning: no report.html: %s", err);
}

/* Expand the Slurm patterns of [job] output in place (not for eval, which writes nothing) and
 * format the effective job, with the expanded directory, for job.ini and checkpoints. */
static int expand_output(struct trainer *t, char *err, size_t errlen)
{
    struct ddp_job *job = &t->job;
    char out[DDP_PATH_MAX], why[DDP_ERR_LEN], where[DDP_PATH_MAX + 64];
    if (!t->eval_only &&
        ddp_outdir_expand(job->output, job->name, out, sizeof out, why, sizeof why) != 0)
        return ddp_err(err, errlen, "%s: %s",
                       ddp_job_where(job, "job", "output", where, sizeof where), why);
    snprintf(t->output_pattern, sizeof t->output_pattern, "%s", job->output);
    if (!t->eval_only)
        snprintf(job->output, sizeof job->output, "%s", out);
    t->job_text = ddp_outdir_job_text(job);
    return 0;
}

/* The job's checks that need no peer: signals, eval's test split, the output directory. */
static int check_job(struct trainer *t)
{
    char err[DDP_ERR_LEN * 2];
    if (ddp_signals_install(&t->job, 0, err, sizeof err) != 0) {
        ddp_warn("%s", err);
        return DDP_EXIT_USAGE;
    }
    if (t->args.mode == DDP_RUN_EVAL && !t->job.data_test[0]) {
        fprintf(stderr, "ddptrain: eval: [data] test is empty; name the test split to evaluate\n");
        return DDP_EXIT_USAGE;
    }
    if (expand_output(t, err, sizeof err) != 0) {
        fprintf(stderr, "ddptrain: %s\n", err);
        return DDP_EXIT_USAGE;
    }
    return 0;
}

/* bf16 asks for autocast GEMMs, which only the CUDA backend has: training or checking such a
 * job on a CPU rank would silently run fp32, so it is refused (1, the reason printed).
 * Evaluation, export and predict read fp32 checkpoints and run in fp32 on a CPU. */
static int refuse_cpu_bf16(const struct trainer *t)
{
    if (t->job.precision != DDP_PRECISION_BF16 ||
        (t->args.mode != DDP_RUN_TRAIN && t->args.mode != DDP_RUN_CHECK &&
         t->args.mode != DDP_RUN_PROFILE))
        return 0;
    char where[DDP_PATH_MAX + 64];
    ddp_warn("%s: bf16 needs a GPU (bf16 GEMMs are CUDA-only), but this rank computes on the "
             "%s; set [train] precision = fp32 (or --set train.precision=fp32), or run on GPU "
             "nodes with [train] device = cuda",
             ddp_job_where(&t->job, "train", "precision", where, sizeof where), t->device);
    return 1;
}

/* Append clause (after sep) to the convolution line of the log and summary, where both are
 * not empty. */
static void append_conv_line(struct trainer *t, const char *sep, const char *clause)
{
    if (clause[0] && t->conv_path[0]) {
        const size_t used = strlen(t->conv_path);
        snprintf(t->conv_path + used, sizeof t->conv_path - used, "%s%s", sep, clause);
    }
}

/* [train] layout on the chosen device (select.h ddp_backend_layout), what it chose appended to
 * the convolution line of the log and summary. Returns 0, or 1 with the reason printed. */
static int start_layout(struct trainer *t, const struct ddp_device_choice *dev)
{
    char line[160], err[DDP_ERR_LEN], where[DDP_PATH_MAX + 64];
    if (ddp_backend_layout(dev, t->job.layout, t->job.precision, line, sizeof line, err,
                           sizeof err) != 0) {
        ddp_warn("%s: nhwc keeps the activations channels-last, which needs cuDNN's "
                 "convolutions, but %s; set [train] layout = auto (or nchw), or conv = auto on a "
                 "node where cuDNN loads",
                 ddp_job_where(&t->job, "train", "layout", where, sizeof where), err);
        return 1;
    }
    append_conv_line(t, "; ", line);
    return 0;
}

/* [train] activations (select.h ddp_backend_act_type), right after the layout: bf16 storage
 * needs precision = bf16 on every device (else the job is inconsistent) and, on a GPU, the
 * cuDNN path. What it chose is appended to the convolution line. Returns 0, or 1 with the
 * reason printed. */
static int start_act_type(struct trainer *t, const struct ddp_device_choice *dev)
{
    char line[160], err[DDP_ERR_LEN], where[DDP_PATH_MAX + 64];
    if (t->job.activations == DDP_ACT_CHOICE_BF16 && t->job.precision != DDP_PRECISION_BF16) {
        ddp_warn("%s: bf16 activations come with bf16 math, but [train] precision = %s; set "
                 "[train] activations = auto (or fp32), or precision = bf16",
                 ddp_job_where(&t->job, "train", "activations", where, sizeof where),
                 ddp_job_precision_name(t->job.precision));
        return 1;
    }
    if (ddp_backend_act_type(dev, t->job.activations, t->job.precision, line, sizeof line, err,
                             sizeof err) != 0) {
        ddp_warn("%s: bf16 stores the activations in 2 bytes, which needs cuDNN's "
                 "convolutions, but %s; set [train] activations = auto (or fp32), or conv = "
                 "auto on a node where cuDNN loads",
                 ddp_job_where(&t->job, "train", "activations", where, sizeof where), err);
        return 1;
    }
    append_conv_line(t, ", ", line);
    return 0;
}

/* How the NCCL id travels (dist/bootstrap.h ddp_bootstrap_decide: auto takes MPI wherever MPI
 * started the process), into o and t->bootstrap_why for the banner; the MPI communicator that
 * carries it when that is the way. Returns 0 or an exit code (the reason printed). */
static int start_bootstrap(struct trainer *t, struct ddp_comm_opts *o)
{
    const struct ddp_world *w = &t->world;
    t->bootstrap =
        ddp_bootstrap_decide((enum ddp_bootstrap_kind)t->job.bootstrap, w, NULL, NULL, HAVE_PMI2,
                             HAVE_MPI, t->bootstrap_why, sizeof t->bootstrap_why);
    o->bootstrap = t->bootstrap;
    if (o->bootstrap != DDP_BOOTSTRAP_MPI)
        return 0;
    char err[DDP_ERR_LEN * 2];
    struct ddp_comm_opts mo = ddp_comm_opts_of(DDP_COMM_MPI, t->job.timeout_s);
    if (ddp_comm_check(&mo, w, err, sizeof err) != 0) {
        if (w->rank == 0)
            ddp_warn("%s", err);
        return DDP_EXIT_LAUNCH;
    }
    t->boot_comm = ddp_comm_create(&mo, w, err, sizeof err);
    if (!t->boot_comm) {
        ddp_warn("%s", err);
        return DDP_EXIT_LAUNCH;
    }
    o->boot_comm = t->boot_comm;
    return 0;
}

/* Device and collectives: the rank's bound GPU (binding doctor) or the CPU, then the
 * communicator. Returns 0 or an exit code (the reason printed). */
static int start_comm(struct trainer *t)
{
    const struct ddp_job *job = &t->job;
    const struct ddp_world *w = &t->world;
    char err[DDP_ERR_LEN * 2];
    struct ddp_device_choice dev;
    int sel = ddp_backend_select(job->device, job->backend == DDP_COMM_NCCL, job->precision,
                                 w->local_rank, w->local_size, &dev, err, sizeof err);
    if (sel != 0) {
        ddp_warn("%s", err);
        return sel == -2 ? DDP_EXIT_USAGE : DDP_EXIT_LAUNCH;
    }
    t->be = dev.be;
    if (t->be->mem_info)
        t->be->mem_info(&t->mem_start);
    snprintf(t->device, sizeof t->device, "%s", dev.name);
    ddp_backend_conv_path(&dev, job->conv, job->deterministic, job->cudnn_api, t->conv_path,
                          sizeof t->conv_path);
    if (start_layout(t, &dev) != 0 || start_act_type(t, &dev) != 0)
        return DDP_EXIT_USAGE;
    const int gpu = dev.device >= 0;
    if (!gpu && refuse_cpu_bf16(t))
        return DDP_EXIT_USAGE;
    if (gpu && job->backend == DDP_COMM_MPI && w->world_size > 1) {
        ddp_warn("[dist] backend = mpi cannot reduce GPU gradients; use backend = nccl (or auto), "
                 "or [train] device = cpu");
        return DDP_EXIT_USAGE;
    }
    if (ddp_graph_init(&t->graph, job, t->be, err, sizeof err) != 0) {
        ddp_warn("%s", err);
        return DDP_EXIT_USAGE;
    }
    struct ddp_comm_opts o = ddp_comm_opts_of(job->backend, job->timeout_s);
    if (gpu &&
        (job->backend == DDP_COMM_NCCL || (job->backend == DDP_COMM_AUTO && w->world_size > 1))) {
        o.backend = DDP_COMM_NCCL;
        o.device = dev.device;
        int rc = start_bootstrap(t, &o);
        if (rc)
            return rc;
    }
    /* the same verdict on every rank (job, build, launcher): rank 0 says it, once */
    if (ddp_comm_check(&o, w, err, sizeof err) != 0) {
        if (w->rank == 0)
            ddp_warn("%s", err);
        return DDP_EXIT_LAUNCH;
    }
    t->comm = ddp_comm_create(&o, w, err, sizeof err);
    if (!t->comm) {
        ddp_warn("%s", err);
        return DDP_EXIT_LAUNCH;
    }
    return 0;
}

/* World, device, communicator (which ddp_die aborts), signals, the host table, the liveness watch and
 * compute threads. Returns 0 or an exit code (the reason printed). */
static int start_world(struct trainer *t)
{
    char err[DDP_ERR_LEN * 2];
    if (ddp_world_detect(&t->world, NULL, NULL, (int)t->job.port, err, sizeof err) != 0) {
        ddp_warn("%s", err);
        return DDP_EXIT_LAUNCH;
    }
    const struct ddp_world *w = &t->world;
    ddp_log_set_identity(w->host, w->rank, w->world_size);
    if (w->warning[0] && w->rank == 0)
        ddp_warn("warning: %s", w->warning);
    if (t->args.mode == DDP_RUN_PROFILE && w->world_size > 1) {
        if (w->rank == 0)
            ddp_warn("profile: %d ranks started (launcher %s); profile runs in one process on "
                     "this node's device: run it without srun, mpirun or launch (or with one "
                     "task)",
                     w->world_size, ddp_launcher_name(w->launcher));
        return DDP_EXIT_USAGE;
    }
    int rc = start_comm(t);
    if (rc)
        return rc;
    ddp_signals_install(&t->job, 1, err,
                        sizeof err); /* after MPI_Init; replaces main's catch-all */
    t->hosts = ddp_calloc((size_t)w->world_size, HOST_FIELD);
    char me[HOST_FIELD];
    snprintf(me, sizeof me, "%s", w->host);
    ddp_comm_allgather(t->comm, me, t->hosts, HOST_FIELD);
    if (w->world_size > 1) {
        t->liveness = ddp_liveness_create(t->comm, w->host);
        ddp_comm_set_peer_probe(t->comm, ddp_liveness_probe, t->liveness);
    }
    t->threads = choose_threads(&t->job, w);
    if (t->be->set_threads)
        t->be->set_threads(t->threads);
    return 0;
}

/* Output directory, data, model and weights, agreed on by all ranks; then the device batch,
 * the buckets and rank 0's state everywhere. Returns 0 or an exit code. */
static int setup_model(struct trainer *t)
{
    const struct ddp_job *job = &t->job;
    char err[DDP_ERR_LEN * 2];
    int code = prepare_output(t, err, sizeof err);
    if (!code)
        code = open_data(t, err, sizeof err);
    if (!code)
        code = build_model(t, err, sizeof err);
    if (!code)
        code = init_weights(t, err, sizeof err);
    if (!code && t->eval_only && t->world.rank == 0 &&
        ddp_ckpt_load_weights(t->eval_only, &t->model, err, sizeof err) != 0)
        code = DDP_EXIT_DATA;
    int rc = trainer_agree(t, code, err);
    if (rc)
        return rc;
    struct ddp_model *m = &t->model;
    if (t->be != ddp_backend_cpu()) {
        t->dev_x = t->be->alloc(sizeof(float) * (size_t)job->batch_size * m->in_elems);
        t->dev_y = t->be->alloc(sizeof(int32_t) * (size_t)job->batch_size);
        if (t->be->upload_batch && t->be->xent_acc && t->be->host_alloc) {
            t->dev_x2 = t->be->alloc(sizeof(float) * (size_t)job->batch_size * m->in_elems);
            t->dev_y2 = t->be->alloc(sizeof(int32_t) * (size_t)job->batch_size);
            t->acc = t->be->alloc(2 * sizeof(double));
            if (t->be->u8_to_float && ddp_h5split_dtype(t->train) == DDP_H5DTYPE_UINT8)
                for (int i = 0; i < 2; i++)
                    t->dev_u8[i] = t->be->alloc((size_t)job->batch_size * m->in_elems);
        }
    }
    ddp_sync_init(&t->sync, t->comm, m, job->bucket_mb);
    if (ddp_sync_check_fingerprint(&t->sync, err, sizeof err) != 0) {
        if (t->world.rank == 0)
            ddp_warn("%s", err);
        return DDP_EXIT_USAGE;
    }
    ddp_sync_broadcast_state(&t->sync);
    if (job->sync_bn && t->world.world_size > 1) {
        m->sync_sums = trainer_sync_sums;
        m->sync_ctx = t->comm;
    }
    return 0;
}

/* The test split's loader (normalised as the job says, never augmented); t->test is open. */
static void test_loader_create(struct trainer *t, const struct ddp_augment *aug)
{
    const struct ddp_world *w = &t->world;
    ddp_sampler_init_eval(&t->test_sampler, ddp_h5split_count(t->test), w->world_size, w->rank);
    t->test_loader = ddp_loader_create(t->test, &t->test_sampler, t->job.batch_size);
    ddp_loader_set_augment(t->test_loader, aug);
}

/* `ddptrain eval`: the test split's loss and accuracy, on every rank's share. */
static int run_eval(struct trainer *t)
{
    const struct ddp_job *job = &t->job;
    const struct ddp_world *w = &t->world;
    int64_t dims[3];
    int nd = ddp_h5split_shape(t->test, dims);
    ddp_augment_init(&t->aug_eval, job, nd, dims, 0);
    test_loader_create(t, &t->aug_eval);
    double loss, acc;
    trainer_evaluate(t, t->test_loader, &loss, &acc);
    ddp_log("%s on %s %s: test loss %.4f accuracy %.4f (%lld samples, %d rank%s)", t->eval_only,
            job->data_file, job->data_test, loss, acc, (long long)ddp_h5split_count(t->test),
            w->world_size, w->world_size > 1 ? "s" : "");
    return 0;
}

/* The banner: versions, world, data, model and the effective job. */
static void log_banner(struct trainer *t)
{
    const struct ddp_job *job = &t->job;
    const struct ddp_world *w = &t->world;
    struct ddp_model *m = &t->model;
    char desc[2048];
    ddp_model_describe(m, desc, sizeof desc);
    ddp_log("ddptrain %s: job %s (%s), %d rank%s, launcher %s, comm %s, device %s, %d "
            "thread%s per rank",
            DDP_VERSION, job->name, job->path, w->world_size, w->world_size > 1 ? "s" : "",
            ddp_launcher_name(w->launcher), ddp_comm_name(t->comm), t->device, t->threads,
            t->threads > 1 ? "s" : "");
    if (t->bootstrap_why[0] && w->world_size > 1)
        ddp_log("bootstrap: the NCCL id through %s (%s)", ddp_bootstrap_name(t->bootstrap),
                t->bootstrap_why);
    if (t->be == ddp_backend_cpu())
        ddp_log("cpu kernels: OpenBLAS %s", ddp_blas_core_describe());
    if (t->conv_path[0])
        ddp_log("convolutions: %s", t->conv_path);
    log_conv_algorithms();
    char shape[96];
    ddp_h5split_shape_text(t->train, shape, sizeof shape);
    ddp_log("data: %s %s %lld samples of %s, %s %lld; %lld steps per epoch of global batch %lld",
            job->data_file, job->data_train, (long long)t->ntrain, shape,
            job->data_test[0] ? job->data_test : "-",
            t->test ? (long long)ddp_h5split_count(t->test) : 0LL, (long long)t->steps_per_epoch,
            (long long)(job->batch_size * w->world_size));
    if (t->nval)
        ddp_log("validation: %lld samples of %s%s, every %lld epoch%s; selection by %s",
                (long long)t->nval, t->val ? job->data_val : job->data_train,
                t->val ? "" : " held out by the seed ([data] val_fraction)",
                (long long)(job->eval_every ? job->eval_every : job->epochs),
                job->eval_every == 1 ? "" : "s", ddp_valsel_metric(&t->valsel));
    ddp_log("model: %zu parameters in %d bucket%s: %s", m->nparams, t->sync.nbuckets,
            t->sync.nbuckets > 1 ? "s" : "", desc);
    if (t->graph.enabled)
        ddp_log("CUDA graphs: the steady-state step is captured once per input buffer and "
                "replayed ([train] cuda_graph)");
    ddp_log("effective job (also in %s/job.ini):", job->output);
    if (w->rank == 0)
        ddp_job_log_lines(job, log_line);
}

/* The training sampler over the train split, or its part that [data] val_fraction leaves;
 * the validation sampler over [data] val or the held-out part. */
static void setup_samplers(struct trainer *t)
{
    const struct ddp_job *job = &t->job;
    const struct ddp_world *w = &t->world;
    int64_t n = ddp_h5split_count(t->train);
    t->ntrain = n;
    if (job->val_fraction > 0) {
        ddp_sampler_holdout(n, job->val_fraction, (uint64_t)job->seed, &t->train_part, &t->val_part,
                            &t->nval);
        t->ntrain = n - t->nval;
    } else if (t->val) {
        t->nval = ddp_h5split_count(t->val);
    }
    ddp_sampler_init(&t->train_sampler, t->ntrain, w->world_size, w->rank, (uint64_t)job->seed,
                     job->shuffle, job->drop_last);
    t->train_sampler.subset = t->train_part;
    if (t->nval) {
        ddp_sampler_init_eval(&t->val_sampler, t->nval, w->world_size, w->rank);
        t->val_sampler.subset = t->val_part;
    }
}

/* Loaders of every split, with [data] augment (training) and normalize (all). */
static void setup_loaders(struct trainer *t)
{
    const struct ddp_job *job = &t->job;
    int64_t dims[3];
    int nd = ddp_h5split_shape(t->train, dims);
    ddp_augment_init(&t->aug_train, job, nd, dims, 1);
    ddp_augment_init(&t->aug_eval, job, nd, dims, 0);
    t->train_loader = trainer_loader_create(t);
    ddp_loader_set_augment(t->train_loader, &t->aug_train);
    if (t->test)
        test_loader_create(t, &t->aug_eval);
    if (t->nval) {
        t->val_loader =
            ddp_loader_create(t->val ? t->val : t->train, &t->val_sampler, job->batch_size);
        ddp_loader_set_augment(t->val_loader, &t->aug_eval);
    }
}

/* 1 when dir/job.ini holds exactly text (the same effective job). */
static int same_job_file(const char *dir, const char *text)
{
    char path[DDP_PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/job.ini", dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t len = strlen(text);
    char *buf = ddp_malloc(len + 1);
    size_t got = fread(buf, 1, len + 1, f); /* one byte more: a longer file differs */
    fclose(f);
    int same = got == len && memcmp(buf, text, len) == 0;
    free(buf);
    return same;
}

/* Every rank: 1 when rank 0 finds the run's summary after its last start in metrics.jsonl
 * and either the checkpoint resumed ends the training this job asks for, or the summary
 * counts all its steps and job.ini is this very job (a run ended by max_steps has no
 * checkpoint at its end). Such a re-run of a finished job writes nothing: no second summary,
 * no report, job.ini untouched (rank 0 says so). */
static int already_finished(struct trainer *t, const struct ddp_ckpt_pos *start)
{
    const struct ddp_job *job = &t->job;
    int64_t total = t->steps_per_epoch * job->epochs, done = 0, steps;
    if (job->max_steps > 0 && job->max_steps < total)
        total = job->max_steps;
    int at_end = t->resumed && (start->epoch >= job->epochs || start->step >= total ||
                                (t->nval && ddp_valsel_stop(&t->valsel, job->early_stop)));
    char path[DDP_PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/metrics.jsonl", job->output);
    if (t->world.rank == 0 && ddp_metrics_finished(path, &steps))
        done = at_end || (steps >= total && same_job_file(job->output, t->job_text));
    if (done)
        ddp_log("already finished: %s holds this job's finished run (%lld steps of %lld, its "
                "summary in metrics.jsonl); nothing written. Raise [train] epochs or max_steps "
                "to train on, or set [checkpoint] resume = never to start afresh",
                job->output, (long long)(at_end ? start->step : steps), (long long)total);
    ddp_comm_broadcast(t->comm, &done, sizeof done, 0);
    return done != 0;
}

/* Rank 0: the training samples (those [data] val_fraction leaves) give no whole batch. */
static void warn_no_batch(const struct trainer *t)
{
    const struct ddp_job *job = &t->job;
    char held[DDP_PATH_MAX + 128] = "", fix[64] = "";
    if (job->val_fraction > 0) {
        snprintf(held, sizeof held, " (of %lld in %s, [data] val_fraction = %g holds out %lld)",
                 (long long)ddp_h5split_count(t->train), job->data_train, job->val_fraction,
                 (long long)t->nval);
        snprintf(fix, sizeof fix, ", lower [data] val_fraction");
    }
    ddp_warn("%s: %lld training samples%s give no whole batch of %lld per rank on %d rank%s with "
             "drop_last; lower [data] batch_size%s or set drop_last = false",
             job->data_file, (long long)t->ntrain, held, (long long)job->batch_size,
             t->world.world_size, t->world.world_size > 1 ? "s" : "", fix);
}

/* Every rank runs rank 0's convolution algorithms (GPU with cuDNN): rank 0 first takes the
 * resumed checkpoint's where they apply here, then sends its choices to the others. So the
 * ranks of a job and a resumed run compute what an uninterrupted run computes. */
static void share_conv_choices(struct trainer *t)
{
    char why[DDP_ERR_LEN];
    int64_t n = 0;
    char *text = NULL;
    if (!t->conv_path[0])
        return;
    if (t->world.rank == 0) {
        if (t->conv_ckpt) {
            const int got = ddp_backend_conv_adopt(t->conv_ckpt, 1, why, sizeof why);
            if (got < 0)
                ddp_warn("warning: the checkpoint's convolution algorithms are not taken (%s): "
                         "the algorithms timed here may differ in the last bits from those of "
                         "an uninterrupted run",
                         why);
            else if (got > 0)
                ddp_log("convolutions: %d algorithm choice%s taken from the checkpoint", got,
                        got == 1 ? "" : "s");
        }
        text = ddp_malloc(DDP_CKPT_CONV_MAX);
        n = (int64_t)ddp_backend_conv_choices(text, DDP_CKPT_CONV_MAX);
    }
    if (t->world.world_size > 1) {
        ddp_comm_broadcast(t->comm, &n, sizeof n, 0);
        if (n > 0 && t->world.rank != 0) {
            text = ddp_malloc((size_t)n + 1);
            text[n] = 0;
        }
        if (n > 0)
            ddp_comm_broadcast(t->comm, text, (size_t)n, 0);
        if (n > 0 && t->world.rank != 0 && ddp_backend_conv_adopt(text, 0, why, sizeof why) < 0)
            ddp_warn("warning: rank %d runs its own convolution algorithms, not rank 0's (%s)",
                     t->world.rank, why);
    }
    free(text);
}

/* Optimiser, trainer_resume, sampler and loaders, the output directory committed; then the loop. */
static int run_training(struct trainer *t, double t_setup)
{
    const struct ddp_job *job = &t->job;
    const struct ddp_world *w = &t->world;
    char err[DDP_ERR_LEN * 2];
    ddp_optim_init(&t->optim, t->be, job, t->model.nparams, w->world_size);
    struct ddp_ckpt_pos start;
    int rc = trainer_resume(t, &start, err, sizeof err);
    if (rc)
        return rc;
    rc = trainer_agree(t, w->rank == 0 ? check_resumed_output(t, err, sizeof err) : 0, err);
    if (rc)
        return rc;
    share_conv_choices(t);
    setup_samplers(t);
    t->steps_per_epoch =
        (ddp_sampler_steps(&t->train_sampler, job->batch_size) + job->accumulate - 1) /
        job->accumulate;
    t->optim.steps_per_epoch = t->steps_per_epoch;
    if (t->steps_per_epoch < 1) {
        if (w->rank == 0)
            warn_no_batch(t);
        return DDP_EXIT_USAGE;
    }
    if (ddp_optim_check_schedule(job, t->steps_per_epoch, err, sizeof err) != 0) {
        if (w->rank == 0)
            ddp_warn("%s", err);
        return DDP_EXIT_USAGE;
    }
    if (t->args.mode == DDP_RUN_CHECK)
        return trainer_check_summary(t, &start, t_setup);
    if (already_finished(t, &start))
        return 0;
    rc = trainer_agree(t, w->rank == 0 ? commit_output(t, err, sizeof err) : 0, err);
    if (rc)
        return rc;
    trainer_log_event(t, "start", start.epoch + 1, start.step, NULL);
    setup_loaders(t);
    log_banner(t);
    ddp_log("setup took %.3fs", ddp_now() - t_setup);
    rc = trainer_loop(t, &start);
    write_report(t, rc);
    return rc;
}

/* `ddptrain profile`: the optimiser, then train/profile.h on the built model. */
static int run_profile(struct trainer *t)
{
    ddp_optim_init(&t->optim, t->be, &t->job, t->model.nparams, t->world.world_size);
    t->optim.steps_per_epoch = 1;
    const struct ddp_profile_setup p = {.model = &t->model,
                                        .sync = &t->sync,
                                        .optim = &t->optim,
                                        .job = &t->job,
                                        .device = t->device,
                                        .conv_path = t->conv_path,
                                        .acc = t->acc,
                                        .warmup = t->args.warmup,
                                        .steps = t->args.steps,
                                        .json = t->args.json};
    return ddp_profile_run(&p);
}

/* The one cleanup path: everything the trainer holds, in reverse order of setup; accepts a
 * trainer at any point of its setup. */
static void teardown(struct trainer *t)
{
    ddp_loader_destroy(t->train_loader);
    ddp_loader_destroy(t->test_loader);
    ddp_loader_destroy(t->val_loader);
    ddp_sampler_free(&t->train_sampler);
    ddp_sampler_free(&t->test_sampler);
    ddp_sampler_free(&t->val_sampler);
    free(t->train_part);
    free(t->val_part);
    ddp_optim_free(&t->optim);
    ddp_sync_free(&t->sync);
    free(t->conv_ckpt);
    if (t->dev_x) {
        t->be->free(t->dev_x);
        t->be->free(t->dev_y);
    }
    if (t->acc) {
        t->be->free(t->dev_x2);
        t->be->free(t->dev_y2);
        t->be->free(t->acc);
    }
    for (int i = 0; i < 2; i++)
        if (t->dev_u8[i])
            t->be->free(t->dev_u8[i]);
    ddp_model_free(&t->model);
    ddp_h5split_close(t->train);
    ddp_h5split_close(t->test);
    ddp_h5split_close(t->val);
    ddp_metrics_close(&t->metrics);
    free(t->hosts);
    ddp_comm_destroy(t->comm); /* releases PMI2 if the NCCL id travelled that way */
    ddp_comm_destroy(t->boot_comm);
    ddp_liveness_destroy(t->liveness);
    ddp_outdir_unlock(t->lock_fd);
    DDP_FREE(t->job_text);
    ddp_job_free(&t->job);
}

int ddp_train_run(struct ddp_job *job, const struct ddp_run_args *args)
{
    static struct trainer tr; /* large; one per process */
    struct trainer *t = &tr;
    t->job = *job;
    memset(job, 0, sizeof *job);
    t->args = *args;
    t->eval_only = args->checkpoint;
    t->lock_fd = -1;
    t->hooks = ddp_test_hooks();
    if (args->mode == DDP_RUN_PROFILE) { /* no samples read; the step timed without graphs */
        t->job.cache_mb = 0;
        t->job.cuda_graph = DDP_CUDA_GRAPH_OFF;
    }
    int rc = check_job(t);
    if (!rc)
        rc = start_world(t);
    double t_setup = ddp_now();
    if (!rc)
        rc = setup_model(t);
    if (!rc && t->args.finish) {
        char err[DDP_ERR_LEN * 2];
        rc = t->args.finish(&t->args, &t->model, &t->job, err, sizeof err);
    } else if (!rc && t->args.mode == DDP_RUN_PROFILE) {
        rc = run_profile(t);
    } else if (!rc) {
        rc = t->eval_only ? run_eval(t) : run_training(t, t_setup);
    }
    teardown(t);
    return rc;
}
