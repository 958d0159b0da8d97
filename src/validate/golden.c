/*
 * golden.c - the golden training run of `ddptrain validate` and its reference files.
 * See validate.h for what is checked; docs/validate.md for the file format.
 *
 * Dimension letters: B per-rank batch, W world size, S steps, K classes, D = C*H*W features.
 * The run goes through the trainer's own step (train/step.h): ddp_model forward/backward on
 * the backend, ddp_sync buckets all-reduced during backward (a bucket cap of a few KB gives
 * several buckets even on this small model), ddp_optim's SGD. Only the data is in memory
 * (ddp_synth_generate, no HDF5 file), and a per-layer hook of this file's own watches each
 * rank's local gradients before they are averaged.
 * What it leaves to others: judging the trajectory (validate.c), deadlines (comm).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "job/config.h"
#include "data/synth.h"
#include "train/grad_sync.h"
#include "nn/model.h"
#include "train/optim.h"
#include "train/step.h"
#include "core/fileio.h"
#include "core/hash.h"
#include "core/util.h"
#include "validate/validate.h"

/* The golden run; DDP_VALIDATE_GOLDEN_SPEC says the same in words (keep them together). */
#define G_LAYERS "conv2d(6, 3, pad=1), relu, maxpool(2), flatten, linear(32), relu, linear(4)"
#define G_C 1
#define G_H 12
#define G_W 12
#define G_CLASSES 4
#define G_DATA_SEED 7
#define G_INIT_SEED 1234
#define G_LR 0.05
#define G_MOMENTUM 0.9
#define G_WD 1e-4
#define G_BATCH 16
#define G_BUCKET_MB 0.004

/* Reference files: longest line, largest world size stored (the line holds 2 W numbers). */
#define REF_LINE_MAX (1 << 20)
#define REF_MAX_WORLD 4096

static uint64_t hash_params(const struct ddp_model *m, float *host)
{
    m->be->download(host, m->params, sizeof(float) * m->nparams);
    return ddp_fnv1a64(DDP_FNV1A64_INIT, host, sizeof(float) * m->nparams);
}

/* The backward hook: adds the layer's local gradient to the norm (and, as a fault, scales it)
 * before ddp starts the bucket's all-reduce on it. */
struct hook_ctx {
    struct ddp_sync *sync;
    struct ddp_model *m;
    float *host;   /* scratch of nparams floats */
    double sumsq;  /* local gradient, squared norm so far this step */
    int scale_now; /* fault bad_grad at this step */
};

static void layer_done(void *ctx, int layer)
{
    struct hook_ctx *h = ctx;
    const struct ddp_layer *l = &h->m->layers[layer];
    const size_t off[2] = {l->w_off, l->b_off}, n[2] = {l->w_n, l->b_n};
    for (int k = 0; k < 2; k++) {
        if (!n[k])
            continue;
        if (h->scale_now)
            h->m->be->scale(h->m->grads + off[k], n[k], 1.01f);
        h->m->be->download(h->host, h->m->grads + off[k], sizeof(float) * n[k]);
        for (size_t i = 0; i < n[k]; i++)
            h->sumsq += (double)h->host[i] * h->host[i];
    }
    ddp_sync_layer_done(h->sync, layer);
}

void ddp_validate_golden_free(struct ddp_validate_golden *g)
{
    if (!g)
        return;
    DDP_FREE(g->loss);
    DDP_FREE(g->local);
    DDP_FREE(g->hash);
    DDP_FREE(g->at_rest);
    DDP_FREE(g->final_hash);
}

/* The golden run's data: steps global batches of synthetic images, in memory. */
static ddp_synth *golden_data(int steps, int W, char *err, size_t errlen)
{
    ddp_synth_spec spec;
    ddp_synth_defaults(&spec);
    spec.rank = 3;
    spec.dims[0] = G_C;
    spec.dims[1] = G_H;
    spec.dims[2] = G_W;
    spec.classes = G_CLASSES;
    spec.n_train = (int64_t)steps * G_BATCH * W;
    spec.n_test = 1;
    spec.seed = G_DATA_SEED;
    spec.dtype = DDP_H5DTYPE_FLOAT32;
    return ddp_synth_create(&spec, err, errlen);
}

/* The golden run's optimiser: SGD with momentum and weight decay, constant lr. */
static void golden_optim(struct ddp_optim *opt, const struct ddp_backend *be, size_t nparams, int W)
{
    struct ddp_job job;
    ddp_job_defaults(&job);
    job.optim = DDP_OPTIM_SGD;
    job.lr = G_LR;
    job.momentum = G_MOMENTUM;
    job.nesterov = 0;
    job.weight_decay = G_WD;
    job.lr_scaling = DDP_LR_SCALING_NONE;
    job.schedule = DDP_SCHEDULE_CONSTANT;
    job.warmup_epochs = 0;
    ddp_optim_init(opt, be, &job, nparams, W);
    ddp_job_free(&job);
}

/* Everybody's trajectory into g, on every rank: loss (S) global, mine (S, 2) this rank's
 * local loss and gradient norm, hmine (S) its parameter hashes, at_rest and fin its tail. */
static void gather_trajectory(ddp_comm *c, struct ddp_validate_golden *g, int steps, double *loss,
                              const double *mine, const uint64_t *hmine, int64_t at_rest,
                              uint64_t fin)
{
    const int W = ddp_comm_size(c);
    g->steps = steps;
    g->world_size = W;
    g->loss = loss;
    double *lall = ddp_malloc(sizeof(double) * (size_t)steps * 2 * (size_t)W); /* (W, S, 2) */
    ddp_comm_allgather(c, mine, lall, sizeof(double) * (size_t)steps * 2);
    uint64_t *hall = ddp_malloc(sizeof(uint64_t) * (size_t)steps * (size_t)W); /* (W, S) */
    ddp_comm_allgather(c, hmine, hall, sizeof(uint64_t) * (size_t)steps);
    int64_t tail[2] = {at_rest, (int64_t)fin}, *tails = ddp_malloc(sizeof tail * (size_t)W);
    ddp_comm_allgather(c, tail, tails, sizeof tail);
    g->local = ddp_malloc(sizeof(double) * (size_t)steps * 2 * (size_t)W);
    g->hash = ddp_malloc(sizeof(uint64_t) * (size_t)steps * (size_t)W);
    g->at_rest = ddp_malloc(sizeof(int) * (size_t)W);
    g->final_hash = ddp_malloc(sizeof(uint64_t) * (size_t)W);
    for (int r = 0; r < W; r++) {
        for (int s = 0; s < steps; s++) {
            const size_t to = (size_t)s * W + (size_t)r, from = (size_t)r * steps + (size_t)s;
            g->local[2 * to] = lall[2 * from];
            g->local[2 * to + 1] = lall[2 * from + 1];
            g->hash[to] = hall[from];
        }
        g->at_rest[r] = (int)tails[2 * r];
        g->final_hash[r] = (uint64_t)tails[2 * r + 1];
    }
    free(lall);
    free(hall);
    free(tails);
}

int ddp_validate_golden_run(ddp_comm *c, const struct ddp_backend *be, int steps, unsigned faults,
                            struct ddp_validate_golden *g, char *err, size_t errlen)
{
    const int W = ddp_comm_size(c), rank = ddp_comm_rank(c);
    memset(g, 0, sizeof *g);
    if (steps < 1 || steps > DDP_VALIDATE_MAX_STEPS)
        return ddp_err(err, errlen, "golden run: %d steps; expected 1 to %d", steps,
                       DDP_VALIDATE_MAX_STEPS);
    const int flip = (faults & DDP_VALIDATE_GOLDEN_FLIP_PARAM) != 0;
    const int badg = (faults & DDP_VALIDATE_GOLDEN_BAD_GRAD) != 0;

    ddp_synth *gen = golden_data(steps, W, err, errlen);
    if (!gen)
        return -1;
    struct ddp_model m;
    memset(&m, 0, sizeof m);
    const int64_t dims[3] = {G_C, G_H, G_W};
    if (ddp_model_create(&m, be, G_LAYERS, 3, dims, G_BATCH, err, errlen) != 0) {
        ddp_synth_destroy(gen);
        return -1;
    }
    ddp_model_init(&m, G_INIT_SEED);
    struct ddp_sync sync;
    ddp_sync_init(&sync, c, &m, G_BUCKET_MB);
    if (ddp_sync_check_fingerprint(&sync, err, errlen) != 0) {
        ddp_sync_free(&sync);
        ddp_model_free(&m);
        ddp_synth_destroy(gen);
        return -1;
    }
    ddp_sync_broadcast_state(&sync);
    struct ddp_optim opt;
    golden_optim(&opt, be, m.nparams, W);

    const size_t D = (size_t)G_C * G_H * G_W;
    float *xh = ddp_malloc(sizeof(float) * D * G_BATCH); /* (B, D) host */
    int32_t *y = ddp_malloc(sizeof(int32_t) * G_BATCH);  /* (B) host */
    float *x = be->alloc(sizeof(float) * D * G_BATCH);   /* (B, D) backend */
    int32_t *yb = be->alloc(sizeof(int32_t) * G_BATCH);  /* (B) backend: xent reads it there */
    float *host = ddp_malloc(sizeof(float) * (m.nparams + 1));
    double *loss = ddp_calloc((size_t)steps, sizeof(double));
    double *mine = ddp_calloc((size_t)steps * 2, sizeof(double));  /* (S, 2) */
    uint64_t *hmine = ddp_calloc((size_t)steps, sizeof(uint64_t)); /* (S) */
    int64_t at_rest = -1;
    struct hook_ctx hc = {&sync, &m, host, 0, 0};
    const struct ddp_step step = {
        .model = &m, .sync = &sync, .optim = &opt, .layer_done = layer_done, .layer_ctx = &hc};

    for (int s = 0; s < steps; s++) {
        if (s > 0 && at_rest < 0 && hash_params(&m, host) != hmine[s - 1])
            at_rest = s;
        ddp_synth_generate(gen, 0, ((int64_t)s * W + rank) * G_BATCH, G_BATCH, xh, y);
        be->upload(x, xh, sizeof(float) * D * G_BATCH);
        be->upload(yb, y, sizeof(int32_t) * G_BATCH);
        hc.sumsq = 0;
        hc.scale_now = badg && s == steps / 3;
        double lsum = ddp_step_run(&step, x, yb, G_BATCH, 0, G_LR);
        double red[2] = {lsum, G_BATCH};
        ddp_comm_allreduce(c, red, 2, DDP_F64);
        loss[s] = red[0] / red[1];
        mine[2 * s] = lsum / G_BATCH;
        mine[2 * s + 1] = sqrt(hc.sumsq);
        hmine[s] = hash_params(&m, host);
        if (flip && s == steps / 2) /* fault: one bit of one parameter, at rest */
            ddp_step_flip_bit(be, m.params);
    }
    uint64_t fin = hash_params(&m, host);
    if (at_rest < 0 && fin != hmine[steps - 1])
        at_rest = steps;

    gather_trajectory(c, g, steps, loss, mine, hmine, at_rest, fin);
    free(mine);
    free(hmine);
    free(host);
    free(xh);
    free(y);
    be->free(x);
    be->free(yb);
    ddp_optim_free(&opt);
    ddp_sync_free(&sync);
    ddp_model_free(&m);
    ddp_synth_destroy(gen);
    return 0;
}

/* ---- reference files ------------------------------------------------------------------- */

int ddp_validate_ref_write(const struct ddp_validate_golden *g, const char *backend,
                           const char *path, char *err, size_t errlen)
{
    struct ddp_atomic_file af;
    FILE *f = ddp_atomic_open(&af, path);
    if (!f)
        return ddp_err(err, errlen, "%s.tmp: cannot write: %s", path, strerror(errno));
    const int W = g->world_size;
    fprintf(f, "# ddptrain validate reference (docs/validate.md): the golden run's trajectory.\n"
               "# step S: the global mean loss, then per rank its local loss and the norm of\n"
               "# its local gradient (before the all-reduce).\n");
    fprintf(f, "format 1\nbackend %s\nworld_size %d\nsteps %d\nspec %s\n", backend, W, g->steps,
            DDP_VALIDATE_GOLDEN_SPEC);
    for (int s = 0; s < g->steps; s++) {
        fprintf(f, "step %d %.9g", s, g->loss[s]);
        for (int r = 0; r < W; r++)
            fprintf(f, " %.9g %.9g", g->local[((size_t)s * W + r) * 2],
                    g->local[((size_t)s * W + r) * 2 + 1]);
        fputc('\n', f);
    }
    return ddp_atomic_close(&af, err, errlen) != 0 ? -1 : 0;
}

void ddp_validate_ref_free(struct ddp_validate_ref *r)
{
    if (!r)
        return;
    DDP_FREE(r->loss);
    DDP_FREE(r->local);
}

/* Parse a double token; advances *p. */
static int next_double(char **p, double *out)
{
    char *end;
    while (**p == ' ' || **p == '\t')
        (*p)++;
    if (!**p || **p == '\n')
        return -1;
    errno = 0;
    *out = strtod(*p, &end);
    if (end == *p || errno == ERANGE || !isfinite(*out))
        return -1;
    *p = end;
    return 0;
}

/* The values of a line "step S LOSS (LOCAL_LOSS GRAD_NORM) x W", S being the next expected. */
static int read_step(struct ddp_validate_ref *r, int format, const char *val, int seen, char *err,
                     size_t errlen)
{
    if (!format || !r->world_size || !r->steps)
        return ddp_err(err, errlen, "step before the format, world_size and steps lines");
    if (!r->loss) {
        r->loss = ddp_calloc((size_t)r->steps, sizeof(double));
        r->local = ddp_calloc((size_t)r->steps * 2 * (size_t)r->world_size, sizeof(double));
    }
    char *p = (char *)val, *end;
    long s = strtol(p, &end, 10);
    if (end == p || s != seen || s >= r->steps)
        return ddp_err(err, errlen, "expected 'step %d ...'", seen);
    p = end;
    int ok = next_double(&p, &r->loss[s]) == 0;
    for (int k = 0; ok && k < 2 * r->world_size; k++)
        ok = next_double(&p, &r->local[(size_t)s * 2 * r->world_size + k]) == 0;
    while (*p == ' ' || *p == '\t')
        p++;
    if (!ok || *p)
        return ddp_err(err, errlen, "expected 1 + 2 x %d finite numbers after the step index",
                       r->world_size);
    return 0;
}

int ddp_validate_ref_read(struct ddp_validate_ref *r, const char *path, char *err, size_t errlen)
{
    memset(r, 0, sizeof *r);
    FILE *f = fopen(path, "r");
    if (!f)
        return ddp_err(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    char *line = ddp_malloc(REF_LINE_MAX);
    int lineno = 0, format = 0, seen = 0, rc = -1;
    while (fgets(line, REF_LINE_MAX, f)) {
        lineno++;
        size_t len = strlen(line);
        if (len == REF_LINE_MAX - 1 && line[len - 1] != '\n') {
            ddp_err(err, errlen, "%s:%d: line too long", path, lineno);
            goto done;
        }
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = '\0';
        if (!len || line[0] == '#')
            continue;
        char *sp = strchr(line, ' ');
        const char *val = sp ? sp + 1 : "";
        if (sp)
            *sp = '\0';
        if (!strcmp(line, "format")) {
            format = atoi(val);
            if (format != 1) {
                ddp_err(err, errlen, "%s:%d: format %s; this ddptrain reads format 1", path, lineno,
                        val);
                goto done;
            }
        } else if (!strcmp(line, "backend")) {
            snprintf(r->backend, sizeof r->backend, "%s", val);
        } else if (!strcmp(line, "spec")) {
            snprintf(r->spec, sizeof r->spec, "%s", val);
        } else if (!strcmp(line, "world_size") || !strcmp(line, "steps")) {
            int64_t v;
            const int is_w = line[0] == 'w';
            const int64_t max = is_w ? REF_MAX_WORLD : DDP_VALIDATE_MAX_STEPS;
            const int again = is_w ? r->world_size != 0 : r->steps != 0;
            if (ddp_parse_i64(val, &v) != 0 || v < 1 || v > max || again) {
                ddp_err(err, errlen, "%s:%d: %s '%s': expected one value from 1 to %lld", path,
                        lineno, line, val, (long long)max);
                goto done;
            }
            if (is_w)
                r->world_size = (int)v;
            else
                r->steps = (int)v;
        } else if (!strcmp(line, "step")) {
            if (read_step(r, format, val, seen, err, errlen) != 0) {
                char why[DDP_ERR_LEN];
                snprintf(why, sizeof why, "%s", err);
                ddp_err(err, errlen, "%s:%d: %s", path, lineno, why);
                goto done;
            }
            seen++;
        } else {
            ddp_err(err, errlen, "%s:%d: unknown line '%s'", path, lineno, line);
            goto done;
        }
    }
    if (ferror(f)) {
        ddp_err(err, errlen, "%s: read error", path);
        goto done;
    }
    if (!format || !r->backend[0] || !r->spec[0] || !r->world_size || seen != r->steps ||
        !r->steps) {
        ddp_err(err, errlen,
                "%s: incomplete reference (needs format, backend, world_size, steps, "
                "spec and every step; %d of %d steps found)",
                path, seen, r->steps);
        goto done;
    }
    rc = 0;
done:
    free(line);
    fclose(f);
    if (rc != 0)
        ddp_validate_ref_free(r);
    return rc;
}

static double rel_diff(double a, double ref)
{
    double d = fabs(a - ref), s = fabs(ref);
    return d / (s > 1e-3 ? s : 1e-3);
}

double ddp_validate_ref_compare(const struct ddp_validate_golden *g,
                                const struct ddp_validate_ref *r, double rtol, int *first_step,
                                int *ranks)
{
    const int W = g->world_size, S = g->steps < r->steps ? g->steps : r->steps;
    double worst = 0;
    *first_step = -1;
    for (int q = 0; q < W; q++)
        ranks[q] = 0;
    for (int s = 0; s < S; s++) {
        double d = rel_diff(g->loss[s], r->loss[s]);
        if (d > worst)
            worst = d;
        if (*first_step >= 0)
            continue;
        int any = d > rtol;
        for (int q = 0; q < W && W == r->world_size; q++) {
            const size_t k = ((size_t)s * W + q) * 2;
            if (rel_diff(g->local[k], r->local[k]) > rtol ||
                rel_diff(g->local[k + 1], r->local[k + 1]) > rtol)
                ranks[q] = any = 1;
        }
        if (any)
            *first_step = s;
    }
    return worst;
}
