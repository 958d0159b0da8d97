/*
 * train_loop.c - the trainer's epoch loop: batches to the device, the step with its bucketed
 * all-reduce, logs and metrics, distributed evaluation, checkpoints and resume, model
 * selection and early stop, the final weights. See train.h and train_impl.h.
 *
 * Dimension letters: B per-rank batch, G global batch (B x W), W world size, K classes.
 */
#include "train/train_impl.h"

#include "core/hash.h"

/* SyncBatchNorm hook: sums over all ranks, in backend memory; on a GPU the compute stream
 * waits for the all-reduce, not the host. */
void trainer_sync_sums(void *ctx, double *buf, size_t n)
{
    ddp_comm *c = ctx;
    ddp_comm_wait_device(c, ddp_comm_allreduce_start(c, buf, n, DDP_F64));
}

/* On a GPU, copy the loader's host batch into device memory and point x, y at it. */
static void to_device(struct trainer *t, const float **x, const int32_t **y, int n)
{
    if (!t->dev_x)
        return;
    t->be->upload(t->dev_x, *x, sizeof(float) * (size_t)n * t->model.in_elems);
    t->be->upload(t->dev_y, *y, sizeof(int32_t) * (size_t)n);
    *x = t->dev_x;
    *y = t->dev_y;
}

/* Until the device has run everything queued so far: under the communicator's deadline where
 * it can fence (NCCL: a dead peer is reported, not waited for forever), else the backend's
 * sync. */
static void device_fence(struct trainer *t)
{
    if (!ddp_comm_fence(t->comm) && t->be->sync)
        t->be->sync();
}

/* The loader's hooks for page-locked slots (ddp_loader_create_device). */
static int64_t loader_copies_done(void *ctx)
{
    const struct trainer *t = ctx;
    return t->be->copies_done();
}

static void loader_wait(void *ctx, int64_t ticket)
{
    struct trainer *t = ctx;
    device_fence(t); /* the compute stream waited for every copy queued so far */
    if (t->be->copies_done() < ticket)
        ddp_die("internal: batch upload %lld not done after a fence", (long long)ticket);
}

/* The training loader: on a backend with upload_batch, slots in page-locked memory that the
 * device reads asynchronously; uint8 images stay uint8 there where the device converts them. */
ddp_loader *trainer_loader_create(struct trainer *t)
{
    if (!t->acc)
        return ddp_loader_create(t->train, &t->train_sampler, t->job.batch_size);
    const struct ddp_loader_device dev = {.alloc = t->be->host_alloc,
                                          .free_fn = t->be->host_free,
                                          .done = loader_copies_done,
                                          .wait = loader_wait,
                                          .ctx = t,
                                          .keep_u8 = t->dev_u8[0] != NULL};
    return ddp_loader_create_device(t->train, &t->train_sampler, t->job.batch_size, &dev);
}

/* A uint8 batch (the loader's bytes) up into du; the step's prologue (convert_u8) converts and
 * normalises it into dx on the device, as the CPU loader converts it (backend.h u8_to_float). */
static void upload_u8(struct trainer *t, float *dx, uint8_t *du, int32_t *dy, const int32_t *y,
                      int n)
{
    const size_t elems = (size_t)n * (size_t)t->model.in_elems;
    const int64_t q = t->be->upload_batch(du, ddp_loader_bytes(t->train_loader), elems, dy, y,
                                          sizeof(int32_t) * (size_t)n);
    ddp_loader_hold(t->train_loader, q);
    t->u8_pending.dx = dx;
    t->u8_pending.du = du;
    t->u8_pending.elems = elems;
}

/* The step's prologue: the pending uint8 batch converted. Part of the step, so a captured step
 * converts its input set's bytes in every replay (a replay does not call it: the graph does). */
static void convert_u8(void *ctx)
{
    struct trainer *t = ctx;
    const struct ddp_augment *a = &t->aug_train;
    if (!t->u8_pending.elems)
        return;
    t->be->u8_to_float(t->u8_pending.dx, t->u8_pending.du, t->u8_pending.elems, a->C, a->H * a->W,
                       a->nchan, a->mean, a->std);
    t->u8_pending.elems = 0;
}

/* The training batch to the device: asynchronously into the next device set where the backend
 * can (the loader keeps the slot until the copy ran), else as to_device. */
static void to_device_async(struct trainer *t, const float **x, const int32_t **y, int n)
{
    if (!t->acc) {
        to_device(t, x, y, n);
        return;
    }
    float *dx = t->dev_set ? t->dev_x2 : t->dev_x;
    int32_t *dy = t->dev_set ? t->dev_y2 : t->dev_y;
    uint8_t *du = t->dev_u8[t->dev_set];
    t->dev_set ^= 1;
    if (ddp_loader_u8(t->train_loader)) {
        upload_u8(t, dx, du, dy, *y, n);
    } else {
        const int64_t q = t->be->upload_batch(dx, *x, sizeof(float) * (size_t)n * t->model.in_elems,
                                              dy, *y, sizeof(int32_t) * (size_t)n);
        ddp_loader_hold(t->train_loader, q);
    }
    *x = dx;
    *y = dy;
}

/* At a log step: the device's loss sum and correct count since the last one, added to
 * loss_acc[0] and loss_acc[2], and the accumulator cleared. */
static void take_device_loss(struct trainer *t, double *loss_acc)
{
    if (!t->acc)
        return;
    double acc[2];
    device_fence(t);
    t->be->download(acc, t->acc, sizeof acc);
    t->be->zero((float *)t->acc, 2 * sizeof(double) / sizeof(float));
    loss_acc[0] += acc[0];
    loss_acc[2] += acc[1];
}

/* Distributed evaluation: each rank takes its share of the loader's split (test or val);
 * sums are reduced. */
void trainer_evaluate(struct trainer *t, ddp_loader *loader, double *loss, double *acc)
{
    char err[DDP_ERR_LEN];
    double sums[3] = {0, 0, 0}; /* loss sum, correct, count */
    if (t->world.world_size > 1 && !t->job.sync_bn && t->model.nbuffers)
        ddp_comm_broadcast(t->comm, t->model.buffers, sizeof(float) * t->model.nbuffers, 0);
    ddp_loader_start(loader, 0, 0);
    const float *x;
    const int32_t *y;
    int n;
    while ((n = ddp_loader_next(loader, &x, &y, err, sizeof err)) > 0) {
        to_device(t, &x, &y, n);
        const float *logits = ddp_model_forward(&t->model, x, n, 0, 0);
        int64_t correct = 0;
        sums[0] += t->be->xent(NULL, &correct, logits, y, n, t->model.classes, 0, 0);
        sums[1] += (double)correct;
        sums[2] += n;
    }
    if (n < 0)
        ddp_die_at(__FILE__, __LINE__, DDP_EXIT_DATA, "%s", err);
    ddp_comm_allreduce(t->comm, sums, 3, DDP_F64);
    *loss = sums[2] > 0 ? sums[0] / sums[2] : NAN;
    *acc = sums[2] > 0 ? sums[1] / sums[2] : NAN;
}

static void fmt_duration(double s, char *buf, size_t len)
{
    if (s < 120)
        snprintf(buf, len, "%.1fs", s);
    else if (s < 7200)
        snprintf(buf, len, "%dm%02ds", (int)(s / 60), (int)fmod(s, 60));
    else
        snprintf(buf, len, "%dh%02dm", (int)(s / 3600), (int)fmod(s / 60, 60));
}

/* Test hook DDP_TEST_FAULT (testhooks.h): after its step, its rank leaves at once with the
 * given code (no abort of the job: as a crash or a lone error would), or stalls. */
static void test_fault_apply(const struct ddp_test_hooks *h, int rank, int64_t step)
{
    if (h->fault_rank != rank || h->fault_step != step)
        return;
    ddp_warn("test hook DDP_TEST_FAULT: %s %g at step %lld", h->fault_action, h->fault_arg,
             (long long)step);
    if (strcmp(h->fault_action, "exit") == 0)
        _exit((int)h->fault_arg);
    struct timespec ts = {(time_t)h->fault_arg,
                          (long)((h->fault_arg - (double)(time_t)h->fault_arg) * 1e9)};
    while (strcmp(h->fault_action, "stall") == 0 && nanosleep(&ts, &ts) != 0)
        ;
}

/* Rank 0 writes a checkpoint at position pos; every rank learns that it is done. */
static void save_checkpoint(struct trainer *t, const struct ddp_ckpt_pos *pos)
{
    char err[DDP_ERR_LEN], dir[DDP_PATH_MAX + 32], path[DDP_PATH_MAX + 64];
    int64_t ok = 1;
    if (t->world.rank == 0) {
        snprintf(dir, sizeof dir, "%s/checkpoints", t->job.output);
        double t0 = ddp_now();
        char *conv = t->conv_path[0] ? ddp_malloc(DDP_CKPT_CONV_MAX) : NULL;
        struct ddp_ckpt_pos at = *pos;
        at.conv_algorithms =
            conv && ddp_backend_conv_choices(conv, DDP_CKPT_CONV_MAX) ? conv : NULL;
        const int failed = ddp_ckpt_save(dir, &t->model, &t->optim, &at, t->job_text,
                                         (int)t->job.ckpt_keep, path, sizeof path, err, sizeof err);
        free(conv);
        if (failed) {
            ok = 0;
        } else {
            if (pos->cursor)
                ddp_log("checkpoint %s at step %lld (in epoch %lld, %lld samples in; %.2fs)", path,
                        (long long)pos->step, (long long)pos->epoch + 1, (long long)pos->cursor,
                        ddp_now() - t0);
            else /* at an epoch boundary: name the epoch that is complete */
                ddp_log("checkpoint %s at step %lld (after epoch %lld; %.2fs)", path,
                        (long long)pos->step, (long long)pos->epoch, ddp_now() - t0);
        }
    }
    ddp_comm_broadcast(t->comm, &ok, sizeof ok, 0);
    if (!ok)
        ddp_die("%s; stopping before any more training is lost",
                t->world.rank == 0 ? err : "rank 0 cannot write a checkpoint");
}

/* Rank 0: refuse a checkpoint that a different job wrote (exit 2, naming the keys that
 * differ). A job attribute that cannot be read is left to ddp_ckpt_load to report. */
static int check_same_job(struct trainer *t, const char *path, char *err, size_t errlen)
{
    const struct ddp_job *job = &t->job;
    char *stored, why[DDP_ERR_LEN], diff[DDP_ERR_LEN], where[DDP_PATH_MAX + 64];
    int64_t saved_batch;
    if (ddp_ckpt_read_job(path, &stored, &saved_batch, why, sizeof why) != 0)
        return 0;
    int n = ddp_jobdiff(job, job->batch_size * t->world.world_size, stored, saved_batch, diff,
                        sizeof diff);
    free(stored);
    if (n < 0)
        ddp_warn("warning: %s records only its job file (an older ddptrain wrote it), so its "
                 "settings are not compared with this job's",
                 path);
    if (n <= 0)
        return 0;
    if (strcmp(job->resume, "auto") == 0)
        ddp_err(err, errlen,
                "%s: %s was written by a different job (%s); set [checkpoint] "
                "resume = never to start afresh (the earlier run's files are moved aside), or "
                "use another [job] output",
                ddp_job_where(job, "job", "output", where, sizeof where), path, diff);
    else
        ddp_err(err, errlen,
                "%s: %s was written by a different job (%s); to start from its "
                "weights instead, set [model] init = %s and [checkpoint] resume = never",
                ddp_job_where(job, "checkpoint", "resume", where, sizeof where), path, diff, path);
    return DDP_EXIT_USAGE;
}

/* Resume per [checkpoint] resume: rank 0 loads, everybody receives the state. Returns an exit
 * code (0 also when there is nothing to trainer_resume). */
int trainer_resume(struct trainer *t, struct ddp_ckpt_pos *pos, char *err, size_t errlen)
{
    const struct ddp_job *job = &t->job;
    memset(pos, 0, sizeof *pos);
    int64_t found = 0;
    int code = 0;
    /* check loads the checkpoint to vet it but resumes nothing */
    const char *resuming =
        t->args.mode == DDP_RUN_CHECK ? "a run would resume from" : "resuming from";
    if (t->world.rank == 0 && strcmp(job->resume, "never") != 0) {
        if (strcmp(job->resume, "auto") == 0) {
            char dir[DDP_PATH_MAX + 32], **list;
            snprintf(dir, sizeof dir, "%s/checkpoints", job->output);
            int n = ddp_ckpt_list(dir, &list);
            for (int i = 0; i < n && !found && !code; i++) {
                code = check_same_job(t, list[i], err, errlen);
                if (code)
                    break;
                if (ddp_ckpt_load(list[i], &t->model, &t->optim, pos, err, errlen) == 0) {
                    found = 1;
                    t->conv_ckpt = ddp_ckpt_read_conv(list[i]);
                    ddp_log("%s %s: epoch %lld, step %lld, %lld samples into the "
                            "epoch (saved by %lld rank%s)",
                            resuming, list[i], (long long)pos->epoch + 1, (long long)pos->step,
                            (long long)pos->cursor, (long long)pos->world_size,
                            pos->world_size == 1 ? "" : "s");
                } else {
                    ddp_warn("skipping checkpoint: %s", err);
                }
            }
            ddp_ckpt_free_list(list, n);
        } else if ((code = check_same_job(t, job->resume, err, errlen)) != 0) {
            /* refused: err says why */
        } else if (ddp_ckpt_load(job->resume, &t->model, &t->optim, pos, err, errlen) == 0) {
            found = 1;
            t->conv_ckpt = ddp_ckpt_read_conv(job->resume);
            ddp_log("%s %s: epoch %lld, step %lld", resuming, job->resume,
                    (long long)pos->epoch + 1, (long long)pos->step);
        } else {
            char where[DDP_PATH_MAX + 64];
            size_t n = strlen(err);
            snprintf(err + n, errlen - n, " (from %s)",
                     ddp_job_where(job, "checkpoint", "resume", where, sizeof where));
            code = DDP_EXIT_DATA;
        }
    }
    if (!found) /* a checkpoint that failed to load may have filled in its position */
        memset(pos, 0, sizeof *pos);
    int rc = trainer_agree(t, code, err);
    if (rc)
        return rc;
    int64_t head[8] = {found,      pos->epoch,    pos->step,       pos->cursor,
                       t->optim.t, pos->train_ms, pos->best_epoch, pos->since_best};
    ddp_comm_broadcast(t->comm, head, sizeof head, 0);
    t->resumed = head[0] != 0;
    ddp_valsel_init(&t->valsel, job->keep_best);
    if (!head[0])
        return 0;
    ddp_comm_broadcast(t->comm, &pos->best, sizeof pos->best, 0);
    t->valsel.best = pos->best;
    t->valsel.best_epoch = pos->best_epoch = head[6];
    t->valsel.since = pos->since_best = head[7];
    pos->epoch = head[1];
    pos->step = head[2];
    pos->cursor = head[3];
    t->optim.t = head[4];
    pos->train_ms = head[5];
    ddp_sync_broadcast_state(&t->sync);
    if (t->world.world_size > 1) {
        if (t->optim.state1)
            ddp_comm_broadcast(t->comm, t->optim.state1, sizeof(float) * t->optim.n, 0);
        if (t->optim.state2)
            ddp_comm_broadcast(t->comm, t->optim.state2, sizeof(float) * t->optim.n, 0);
    }
    return 0;
}

/* Training wall time of every start so far, in ms: the earlier ones' from the checkpoint
 * resumed (start), plus this one's since t0. */
static int64_t total_ms(const struct ddp_ckpt_pos *start, double t0)
{
    return start->train_ms + (int64_t)((ddp_now() - t0) * 1000.0);
}

/* The loss of this batch is not finite: name the culprit (the batch, a layer's weights, or
 * the first layer with a non-finite output) before any update, and stop. */
static void die_nonfinite(struct trainer *t, const float *x, int n, uint64_t noise, int64_t step,
                          double loss)
{
    char why[DDP_ERR_LEN];
    const int64_t *idx = ddp_loader_indices(t->train_loader);
    int data = ddp_model_explain_nonfinite(&t->model, x, n, noise, why, sizeof why);
    ddp_die_at(__FILE__, __LINE__, data ? DDP_EXIT_DATA : DDP_EXIT_RUNTIME,
               "loss is %g at step %lld, on a batch of %s %s holding sample %lld: %s", loss,
               (long long)step, t->job.data_file, t->job.data_train, idx ? (long long)idx[0] : -1LL,
               why);
}

/* Rank 0: a "start" (what ran where, for report.html) or "stop" (the signal) record. */
void trainer_log_event(struct trainer *t, const char *kind, int64_t epoch, int64_t step,
                       const char *signal)
{
    if (t->world.rank != 0)
        return;
    char m[4096], h[256];
    int n = snprintf(m, sizeof m, "\"epoch\":%lld,\"step\":%lld,\"time\":%.3f", (long long)epoch,
                     (long long)step, ddp_wall_time());
    if (signal) {
        snprintf(m + n, sizeof m - (size_t)n, ",\"signal\":\"%s\"", signal);
    } else {
        const struct ddp_world *w = &t->world;
        n += snprintf(m + n, sizeof m - (size_t)n,
                      ",\"version\":\"%s\",\"world_size\":%d,\"launcher\":\"%s\",\"comm\":"
                      "\"%s\",\"device\":\"%s\",\"threads\":%d,\"resumed\":%s,\"hosts\":[",
                      DDP_VERSION, w->world_size, ddp_launcher_name(w->launcher),
                      ddp_comm_name(t->comm), ddp_json_str(t->device, h, sizeof h), t->threads,
                      t->resumed ? "true" : "false");
        for (int r = 0; r < w->world_size && n < (int)sizeof m - 300; r++)
            n += snprintf(m + n, sizeof m - (size_t)n, "%s\"%s\"", r ? "," : "",
                          ddp_json_str(trainer_host_of(t, r), h, sizeof h));
        snprintf(m + n, sizeof m - (size_t)n, "]");
    }
    ddp_metrics_line(&t->metrics, kind, m);
}

/* Every rank's compute seconds per step over the last log interval (busy s over steps):
 * the fastest and the slowest rank's into r. Collective. */
static void step_spread(struct trainer *t, double busy_s, int64_t steps, struct ddp_train_record *r)
{
    double per = steps > 0 ? busy_s / (double)steps : 0;
    double mm[2] = {per, -per};
    ddp_comm_allreduce_max(t->comm, mm, 2, DDP_F64);
    r->step_s_max = mm[0];
    r->step_s_min = -mm[1];
}

/* Where the loop stands; what the log lines and the summary report. */
struct loop {
    const struct ddp_ckpt_pos *start; /* where this start began */
    int64_t total_steps;
    double t0, t_log, last_loss, last_acc;
    double loss_acc[3]; /* local loss sum, samples, correct since the last log */
    int64_t correct;    /* the step function adds each batch's correct predictions here */
    int64_t log_first;  /* the step of the last log line */
    int64_t step, first_step, samples_since_log, epoch, cursor, epoch_end, last_saved;
    int stopped;
    int early_stopped; /* [train] early_stop ended the run */
    FILE *sample_log;  /* test hook DDP_TEST_SAMPLE_LOG: every sample index this rank trained on */
};

/* The step function's non-finite hook: ctx is the trainer; the step is the one running. */
static void nonfinite_hook(void *ctx, const float *x, int n, uint64_t noise, double loss)
{
    struct trainer *t = ctx;
    die_nonfinite(t, x, n, noise, t->lp->step + 1, loss);
}

/* Every log_every steps and at the last: reduce the loss, log a line and a metrics record. */
static void log_progress(struct trainer *t, struct loop *lp, double lr)
{
    const struct ddp_job *job = &t->job;
    int W = t->world.world_size;
    char el[32], left[32];
    take_device_loss(t, lp->loss_acc);
    double red[3] = {lp->loss_acc[0], lp->loss_acc[1], lp->loss_acc[2]};
    ddp_comm_allreduce(t->comm, red, 3, DDP_F64);
    double now = ddp_now();
    double mean = red[0] / red[1];
    double sps = (double)lp->samples_since_log / (now - lp->t_log);
    double per_step = (now - lp->t0) / (double)(lp->step - lp->first_step);
    double comm_s, busbw;
    ddp_sync_take_stats(&t->sync, &comm_s, &busbw);
    double comm_frac = W > 1 ? comm_s / (now - lp->t_log) : -1;
    struct ddp_train_record rec = {
        lp->epoch + 1, lp->step, mean, red[2] / red[1], lr, sps, comm_frac, busbw, -1, -1};
    if (W > 1) /* per-rank spread of the time not spent waiting on all-reduce */
        step_spread(t, now - lp->t_log - comm_s, lp->step - lp->log_first, &rec);
    char comm[64] = "";
    if (W > 1 && busbw >= 0)
        snprintf(comm, sizeof comm, " allreduce %.0f%% busbw %.2f GB/s", 100 * comm_frac, busbw);
    else if (W > 1) /* on a GPU: the device's stall on the buckets */
        snprintf(comm, sizeof comm, " allreduce %.0f%%", 100 * comm_frac);
    fmt_duration(now - lp->t0, el, sizeof el);
    fmt_duration(per_step * (double)(lp->total_steps - lp->step), left, sizeof left);
    ddp_log("epoch %lld/%lld step %lld/%lld loss %.4f lr %.4g samples/s %.0f%s elapsed %s "
            "left %s",
            (long long)lp->epoch + 1, (long long)job->epochs, (long long)lp->step,
            (long long)lp->total_steps, mean, lr, sps, comm, el, left);
    ddp_metrics_train(&t->metrics, &rec);
    lp->loss_acc[0] = lp->loss_acc[1] = lp->loss_acc[2] = 0;
    lp->log_first = lp->step;
    lp->samples_since_log = 0;
    lp->t_log = ddp_now();
    if (!isfinite(mean))
        ddp_die("training diverged: loss is %g at step %lld; lower [optim] lr", mean,
                (long long)lp->step);
}

/* After a step: test hooks, the replica check, checkpoints and stop requests. Returns 0 (with
 * lp->stopped set when a signal stopped the run, after a checkpoint) or an exit code. */
/* A checkpoint of the loop's position: after a whole epoch (done) or mid-epoch at the cursor. */
static void save_position(struct trainer *t, struct loop *lp, int done)
{
    const struct ddp_job *job = &t->job;
    const int W = t->world.world_size;
    struct ddp_ckpt_pos pos = {done ? lp->epoch + 1 : lp->epoch,
                               lp->step,
                               done ? 0 : lp->cursor,
                               W,
                               job->batch_size * W,
                               job->seed,
                               total_ms(lp->start, lp->t0),
                               t->valsel.best,
                               t->valsel.best_epoch,
                               t->valsel.since,
                               NULL};
    save_checkpoint(t, &pos);
    lp->last_saved = lp->step;
}

static int after_step(struct trainer *t, struct loop *lp)
{
    const struct ddp_job *job = &t->job;
    int W = t->world.world_size, rank = t->world.rank;
    char err[DDP_ERR_LEN];
    if (t->hooks->flip_step == lp->step && t->hooks->flip_rank == rank)
        ddp_step_flip_bit(t->be, t->model.params); /* test hook: corrupt one bit */
    test_fault_apply(t->hooks, rank, lp->step);
    if (job->check_every > 0 && lp->step % job->check_every == 0 &&
        ddp_sync_check_replicas(&t->sync, t->hosts, HOST_FIELD, err, sizeof err) != 0) {
        if (rank == 0)
            ddp_warn("%s", err);
        ddp_comm_barrier(t->comm);
        return DDP_EXIT_RUNTIME;
    }
    /* stop request: every rank agrees at this step boundary; with the device step only at log
     * and checkpoint steps, which wait for the device anyway (docs/gpu.md) */
    const int ckpt_due = job->ckpt_every_steps > 0 && lp->step % job->ckpt_every_steps == 0;
    const int agree_now =
        !t->acc || ckpt_due || lp->step % job->log_every == 0 || lp->step == lp->total_steps;
    int64_t stop = agree_now ? ddp_signals_stop_requested() : 0;
    if (W > 1 && agree_now)
        ddp_comm_allreduce_max(t->comm, &stop, 1, DDP_I64);
    int at_end = lp->cursor >= lp->epoch_end;
    if (stop || ckpt_due) {
        save_position(t, lp, at_end);
    }
    if (t->be->step_end) /* the GPU twin's per-step counters, the stop agreement included */
        t->be->step_end(rank, (long)lp->step,
                        lp->step % job->log_every == 0 || lp->step == lp->total_steps);
    if (!stop)
        return 0;
    trainer_log_event(t, "stop", lp->epoch + 1, lp->step, ddp_signal_name((int)stop));
    ddp_log("stopped by signal %d (SIG%s) at step %lld after saving a checkpoint; exit 75: "
            "the job resumes from it when it is requeued or run again",
            (int)stop, ddp_signal_name((int)stop), (long long)lp->step);
    lp->stopped = 1;
    return 0;
}

/* The dropout seed of micro-batch j of the coming step (j = 0 without accumulation). */
static uint64_t step_noise(const struct trainer *t, const struct loop *lp, int64_t j)
{
    return (uint64_t)t->job.seed * DDP_SPLITMIX64_GAMMA ^ ((uint64_t)lp->step << 20) ^
           (uint64_t)t->world.rank ^ ((uint64_t)j << 48);
}

/* The steps of one epoch, from lp->cursor. With [train] accumulate = K each optimiser step
 * takes K loader batches (the epoch's last step the rest). Returns 0 (lp->stopped may be set)
 * or an exit code. */
static int run_epoch(struct trainer *t, struct loop *lp)
{
    const struct ddp_job *job = &t->job;
    int W = t->world.world_size, rank = t->world.rank;
    const struct ddp_step step = {.model = &t->model,
                                  .sync = &t->sync,
                                  .optim = &t->optim,
                                  .nonfinite = nonfinite_hook,
                                  .nonfinite_ctx = t,
                                  .correct = &lp->correct,
                                  .acc = t->acc,
                                  .accumulate = (int)job->accumulate,
                                  .label_smoothing = (float)job->label_smoothing,
                                  .prologue = convert_u8,
                                  .prologue_ctx = t};
    const int64_t K = job->accumulate;
    const int64_t micros = ddp_sampler_steps(&t->train_sampler, job->batch_size);
    char err[DDP_ERR_LEN];
    const float *x;
    const int32_t *y;
    int n, rc = 0;
    for (int64_t j = 0; lp->step < lp->total_steps && rc == 0 && !lp->stopped; j++) {
        n = ddp_loader_next(t->train_loader, &x, &y, err, sizeof err);
        if (n < 0)
            ddp_die_at(__FILE__, __LINE__, DDP_EXIT_DATA, "%s", err);
        if (n == 0)
            break;
        if (lp->sample_log) {
            const int64_t *idx = ddp_loader_indices(t->train_loader);
            for (int i = 0; i < n; i++)
                fprintf(lp->sample_log, "%lld %lld\n", (long long)lp->epoch, (long long)idx[i]);
        }
        to_device_async(t, &x, &y, n);
        double lr = ddp_optim_lr(&t->optim, lp->epoch, lp->step, t->steps_per_epoch);
        int first = j % K == 0, last = (j + 1) % K == 0 || j + 1 == micros;
        /* the device set just filled: the one to_device_async did not flip to */
        lp->loss_acc[0] += ddp_graph_micro(&t->graph, &step, x, y, n, t->dev_set ^ 1,
                                           step_noise(t, lp, j % K), lr, first, last);
        t->u8_pending.elems = 0; /* converted by the step, or by the replayed graph */
        lp->loss_acc[1] += n;
        lp->loss_acc[2] += (double)lp->correct;
        lp->correct = 0;
        lp->cursor += job->batch_size * W;
        lp->samples_since_log += (int64_t)n * W;
        if (!last)
            continue;
        lp->step++;
        if (lp->step == lp->first_step + 1 && t->hooks->trace && rank == 0) {
            FILE *f = fopen(t->hooks->trace, "w");
            if (f) {
                ddp_sync_write_trace(&t->sync, f);
                fclose(f);
            }
        }
        if (lp->step % job->log_every == 0 || lp->step == lp->total_steps)
            log_progress(t, lp, lr);
        rc = after_step(t, lp);
    }
    return rc;
}

/* Rank 0: best.h5, the model at its best validation value so far, written atomically. */
static void save_best(struct trainer *t, const struct loop *lp)
{
    char err[DDP_ERR_LEN], path[DDP_PATH_MAX + 64];
    if (t->world.rank != 0)
        return;
    snprintf(path, sizeof path, "%s/best.h5", t->job.output);
    if (ddp_weights_save(path, &t->model, err, sizeof err) != 0)
        ddp_die("%s", err);
    ddp_log("best %s %.4f at epoch %lld: %s", ddp_valsel_metric(&t->valsel), t->valsel.best,
            (long long)lp->epoch + 1, path);
}

/* The validation split after an epoch: log, metrics, model selection, best.h5, early stop. */
static void validate_epoch(struct trainer *t, struct loop *lp)
{
    const struct ddp_job *job = &t->job;
    double loss, acc;
    trainer_evaluate(t, t->val_loader, &loss, &acc);
    int better = ddp_valsel_update(&t->valsel, lp->epoch + 1, loss, acc);
    ddp_log("val epoch %lld step %lld: val loss %.4f accuracy %.4f%s", (long long)lp->epoch + 1,
            (long long)lp->step, loss, acc, better ? " (best so far)" : "");
    ddp_metrics_val(&t->metrics, lp->epoch + 1, lp->step, loss, acc, better);
    if (better && job->keep_best != DDP_KEEP_BEST_NONE)
        save_best(t, lp);
    if (ddp_valsel_stop(&t->valsel, job->early_stop)) {
        ddp_log("early stop: %s has not improved for %lld evaluation%s (best %.4f at epoch "
                "%lld); the run ends here ([train] early_stop = %lld)",
                ddp_valsel_metric(&t->valsel), (long long)t->valsel.since,
                t->valsel.since == 1 ? "" : "s", t->valsel.best, (long long)t->valsel.best_epoch,
                (long long)job->early_stop);
        lp->early_stopped = 1;
    }
}

/* At the end of an epoch: evaluate (val when there is one, else test) and checkpoint when
 * due. */
static void end_epoch(struct trainer *t, struct loop *lp)
{
    const struct ddp_job *job = &t->job;
    int last = lp->epoch + 1 == job->epochs || lp->step >= lp->total_steps;
    int due = last || (job->eval_every > 0 && (lp->epoch + 1) % job->eval_every == 0);
    if (t->val_loader && due && lp->cursor >= lp->epoch_end) {
        validate_epoch(t, lp);
    } else if (t->test && !t->val_loader && due) {
        trainer_evaluate(t, t->test_loader, &lp->last_loss, &lp->last_acc);
        ddp_log("eval epoch %lld step %lld: test loss %.4f accuracy %.4f", (long long)lp->epoch + 1,
                (long long)lp->step, lp->last_loss, lp->last_acc);
        ddp_metrics_eval(&t->metrics, lp->epoch + 1, lp->step, lp->last_loss, lp->last_acc);
    }
    if (job->ckpt_every_epochs > 0 && (lp->epoch + 1) % job->ckpt_every_epochs == 0 &&
        lp->last_saved != lp->step && lp->cursor >= lp->epoch_end) {
        save_position(t, lp, 1);
    }
}

/* On a GPU: the summary's device memory members appended to members (len bytes), and rank 0's
 * log line: the backend's high-water mark of its own allocations (what PyTorch's
 * max_memory_allocated counts) and the device's used memory (cudaMemGetInfo, every process and
 * library included) when the backend was made and now. */
static void memory_summary(const struct trainer *t, char *members, size_t len)
{
    if (!t->be->mem_info)
        return;
    struct ddp_mem_info now;
    t->be->mem_info(&now);
    const size_t before = t->mem_start.dev_total - t->mem_start.dev_free;
    const size_t after = now.dev_total - now.dev_free;
    const size_t used = strlen(members);
    snprintf(members + used, len - used,
             ",\"gpu_mem_peak_bytes\":%zu,\"gpu_mem_allocated_bytes\":%zu,"
             "\"gpu_used_before_bytes\":%zu,\"gpu_used_after_bytes\":%zu,\"gpu_total_bytes\":%zu",
             now.peak, now.allocated, before, after, now.dev_total);
    if (t->world.rank == 0)
        ddp_log("GPU memory: peak %.1f MiB allocated by ddptrain; device used %.1f MiB before, "
                "%.1f MiB now, of %.1f MiB",
                (double)now.peak / 1048576.0, (double)before / 1048576.0, (double)after / 1048576.0,
                (double)now.dev_total / 1048576.0);
}

/* After the last epoch: the final evaluation if none ran, model.h5, the summary record. */
static void finish_training(struct trainer *t, struct loop *lp)
{
    const struct ddp_job *job = &t->job;
    struct ddp_model *m = &t->model;
    int W = t->world.world_size;
    int64_t G = job->batch_size * W;
    char err[DDP_ERR_LEN];
    if (t->test && !isfinite(lp->last_acc)) { /* with val, or a resumed finished run */
        trainer_evaluate(t, t->test_loader, &lp->last_loss, &lp->last_acc);
        ddp_log("test split after epoch %lld step %lld: test loss %.4f accuracy %.4f",
                (long long)lp->epoch, (long long)lp->step, lp->last_loss, lp->last_acc);
        ddp_metrics_eval(&t->metrics, lp->epoch, lp->step, lp->last_loss, lp->last_acc);
    }
    double start_s = ddp_now() - lp->t0, train_s = (double)total_ms(lp->start, lp->t0) / 1000.0;
    char slice[48] = ""; /* after a resume: this start's share of the time */
    if (lp->start->step > 0 && lp->start->train_ms > 0)
        snprintf(slice, sizeof slice, " (%.1fs in this start)", start_s);

    /* final weights: rank 0's running statistics are the model's */
    if (t->world.rank == 0) {
        char path[DDP_PATH_MAX + 64];
        snprintf(path, sizeof path, "%s/model.h5", job->output);
        if (ddp_weights_save(path, m, err, sizeof err) != 0)
            ddp_die("%s", err);
        ddp_log("final weights: %s", path);
    }
    char members[1024], l[32] = "null", a[32] = "null", rate[32] = "null";
    if (lp->step > lp->first_step) /* null when this start trained nothing (a finished run) */
        snprintf(rate, sizeof rate, "%.1f",
                 (double)(lp->step - lp->first_step) * (double)G / start_s);
    if (isfinite(lp->last_loss))
        snprintf(l, sizeof l, "%.6g", lp->last_loss);
    if (isfinite(lp->last_acc))
        snprintf(a, sizeof a, "%.6g", lp->last_acc);
    snprintf(members, sizeof members,
             "\"epochs\":%lld,\"steps\":%lld,\"world_size\":%d,\"global_batch\":%lld,"
             "\"params\":%zu,\"train_s\":%.3f,\"samples_per_s\":%s,\"test_loss\":%s,"
             "\"test_acc\":%s",
             (long long)lp->epoch, (long long)lp->step, W, (long long)G, m->nparams, train_s, rate,
             l, a);
    if (t->val_loader) {
        size_t used = strlen(members);
        char b[32] = "null";
        if (isfinite(t->valsel.best))
            snprintf(b, sizeof b, "%.6g", t->valsel.best);
        snprintf(members + used, sizeof members - used,
                 ",\"val_metric\":\"%s\",\"best_val\":%s,\"best_epoch\":%lld,"
                 "\"early_stopped\":%s",
                 ddp_valsel_metric(&t->valsel), b, (long long)t->valsel.best_epoch,
                 lp->early_stopped ? "true" : "false");
    }
    memory_summary(t, members, sizeof members);
    ddp_metrics_summary(&t->metrics, members);
    if (isfinite(lp->last_acc))
        ddp_log("final test accuracy %.4f (loss %.4f) after %lld steps in %.1fs%s", lp->last_acc,
                lp->last_loss, (long long)lp->step, train_s, slice);
    else
        ddp_log("done: %lld steps in %.1fs%s (no test split evaluated)", (long long)lp->step,
                train_s, slice);
}

int trainer_loop(struct trainer *t, const struct ddp_ckpt_pos *start)
{
    const struct ddp_job *job = &t->job;
    struct loop lp = {.start = start, .last_loss = NAN, .last_acc = NAN, .last_saved = -1};
    lp.total_steps = t->steps_per_epoch * job->epochs;
    if (job->max_steps > 0 && job->max_steps < lp.total_steps)
        lp.total_steps = job->max_steps;
    if (t->hooks->trace && t->world.rank == 0)
        t->sync.trace_on = 1;
    if (t->hooks->sample_log) {
        char p[DDP_PATH_MAX];
        snprintf(p, sizeof p, "%s.%d", t->hooks->sample_log, t->world.rank);
        lp.sample_log = fopen(p, "a");
    }
    lp.t0 = lp.t_log = ddp_now();
    lp.step = lp.first_step = lp.log_first = start->step;
    lp.epoch = start->epoch;
    lp.cursor = start->cursor;
    t->lp = &lp;
    if (lp.epoch >= job->epochs || lp.step >= lp.total_steps)
        ddp_log("nothing to train: the checkpoint is at step %lld of %lld (raise [train] epochs "
                "or max_steps to continue)",
                (long long)lp.step, (long long)lp.total_steps);
    int rc = 0;
    lp.early_stopped = t->val_loader && ddp_valsel_stop(&t->valsel, job->early_stop);
    if (lp.early_stopped)
        ddp_log("nothing to train: the checkpoint's run stopped early (%s did not improve for "
                "%lld evaluations)",
                ddp_valsel_metric(&t->valsel), (long long)t->valsel.since);
    for (; lp.epoch < job->epochs && lp.step < lp.total_steps && !lp.early_stopped;
         lp.epoch++, lp.cursor = 0) {
        ddp_sampler_set_epoch(&t->train_sampler, lp.epoch);
        ddp_sampler_set_cursor(&t->train_sampler, lp.cursor);
        ddp_loader_start(t->train_loader, lp.epoch, 0);
        lp.epoch_end = t->train_sampler.total;
        rc = run_epoch(t, &lp);
        ddp_loader_stop(t->train_loader);
        if (rc || lp.stopped)
            break;
        end_epoch(t, &lp);
    }
    if (lp.sample_log)
        fclose(lp.sample_log);
    t->lp = NULL;
    if (rc)
        return rc;
    if (lp.stopped) {
        ddp_comm_barrier(t->comm);
        return DDP_EXIT_REQUEUE;
    }
    finish_training(t, &lp);
    return 0;
}

/* `ddptrain check`: setup is done; print what it found. */
int trainer_check_summary(struct trainer *t, const struct ddp_ckpt_pos *start, double t_setup)
{
    struct ddp_check_facts cf = {&t->job,
                                 &t->world,
                                 t->device,
                                 ddp_comm_name(t->comm),
                                 t->threads,
                                 t->sync.nbuckets,
                                 &t->model,
                                 t->ntrain,
                                 t->test ? ddp_h5split_count(t->test) : 0,
                                 t->steps_per_epoch,
                                 start,
                                 t->resumed,
                                 ddp_now() - t_setup,
                                 t->nval,
                                 t->conv_path};
    return ddp_check_print(&cf);
}
