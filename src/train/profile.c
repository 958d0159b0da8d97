/*
 * profile.c - `ddptrain profile`: a training step's time per layer (profile.h).
 *
 * Dimension letters: B batch, L layers, N timed steps, K classes.
 */
#include "train/profile.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fileio.h"
#include "core/rng.h"
#include "core/util.h"
#include "train/step.h"

/* The parts of a step besides the layers, in the order of the table's last rows. */
enum part { P_INPUT, P_ZERO, P_LOSS, P_SYNC, P_OPTIM, P_LAYERED, P_WHOLE, P_COUNT };
static const char *const PART_NAMES[P_COUNT] = {
    "input", "zero_grad", "loss", "grad_sync", "optimizer", "step_layered", "step_whole"};
static const char *const PART_TEXT[P_COUNT] = {"the input to channels-last",
                                               "zero the gradients",
                                               "loss (cross-entropy)",
                                               "gradient buckets (1 rank)",
                                               "optimiser step",
                                               "",
                                               ""};
_Static_assert(sizeof PART_NAMES / sizeof *PART_NAMES == P_COUNT, "part names");
_Static_assert(sizeof PART_TEXT / sizeof *PART_TEXT == P_COUNT, "part texts");

struct prof {
    const struct ddp_profile_setup *p;
    struct ddp_model *m;
    const struct ddp_backend *be;
    int B, N, L;
    float *x;     /* (B, in_elems) backend memory */
    int32_t *y;   /* (B) backend memory */
    double lr;    /* the schedule's first */
    double *fwd;  /* (N, L) ms */
    double *bwd;  /* (N, L) ms */
    double *part; /* (N, P_COUNT) ms */
    /* the medians */
    double *mfwd, *mbwd; /* (L) */
    double mpart[P_COUNT];
    double sum; /* of the rows: layers run by themselves and the parts before P_LAYERED */
};

/* Wait for the device (a backend without sync computes synchronously). */
static void fence(const struct ddp_backend *be)
{
    if (be->sync)
        be->sync();
}

/* Milliseconds since *t after a fence; *t becomes now. */
static double lap(const struct ddp_backend *be, double *t)
{
    fence(be);
    const double now = ddp_now(), ms = (now - *t) * 1e3;
    *t = now;
    return ms;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median of v[0], v[stride], ..., n values. */
static double median(const double *v, int n, int stride)
{
    double *c = ddp_malloc(sizeof(double) * (size_t)n);
    for (int i = 0; i < n; i++)
        c[i] = v[(size_t)i * (size_t)stride];
    qsort(c, (size_t)n, sizeof *c, cmp_double);
    const double r = n % 2 ? c[n / 2] : 0.5 * (c[n / 2 - 1] + c[n / 2]);
    free(c);
    return r;
}

/* The step's loss and logits' gradient, as ddp_step_micro computes them (one micro-batch). */
static void loss_of(const struct prof *pr, const float *logits)
{
    struct ddp_model *m = pr->m;
    const float gscale = 1.0f / (float)pr->B, ls = (float)pr->p->job->label_smoothing;
    if (pr->p->acc)
        pr->be->xent_acc(ddp_model_dlogits(m), pr->p->acc, logits, pr->y, pr->B, m->classes, gscale,
                         ls);
    else
        pr->be->xent(ddp_model_dlogits(m), NULL, logits, pr->y, pr->B, m->classes, gscale, ls);
}

/* Timed step s, one layer at a time in ddp_step_micro's order (first = last = 1). */
static void layered_step(struct prof *pr, int s, uint64_t noise)
{
    struct ddp_model *m = pr->m;
    const struct ddp_backend *be = pr->be;
    double *fwd = pr->fwd + (size_t)s * pr->L, *bwd = pr->bwd + (size_t)s * pr->L;
    double *part = pr->part + (size_t)s * P_COUNT;
    fence(be);
    const double t0 = ddp_now();
    double t = t0;
    be->zero(m->grads, m->nparams);
    part[P_ZERO] = lap(be, &t);
    ddp_model_forward_input(m, pr->x, pr->B);
    part[P_INPUT] = lap(be, &t);
    for (int i = 0; i < pr->L; i++) {
        ddp_model_forward_layer(m, i, pr->x, pr->B, 1, noise);
        fwd[i] = lap(be, &t);
    }
    loss_of(pr, ddp_model_forward_end(m, pr->B)); /* fp32 logits (bf16 storage: converted) */
    part[P_LOSS] = lap(be, &t);
    ddp_sync_begin(pr->p->sync);
    part[P_SYNC] = lap(be, &t);
    for (int i = pr->L - 1; i >= 0; i--) {
        ddp_model_backward_layer(m, i, pr->x, pr->B);
        bwd[i] = lap(be, &t);
        if (m->layers[i].w_n) {
            ddp_sync_layer_done(pr->p->sync, i);
            part[P_SYNC] += lap(be, &t);
        }
    }
    ddp_sync_finish(pr->p->sync);
    part[P_SYNC] += lap(be, &t);
    ddp_optim_step(pr->p->optim, m->params, m->grads, pr->lr);
    part[P_OPTIM] = lap(be, &t);
    part[P_LAYERED] = (t - t0) * 1e3;
}

/* n whole steps through the trainer's step; their times into part[P_WHOLE] of steps 0..n-1
 * (NULL: warm-up). */
static void whole_steps(struct prof *pr, int n, double *part)
{
    const struct ddp_step st = {.model = pr->m,
                                .sync = pr->p->sync,
                                .optim = pr->p->optim,
                                .acc = pr->p->acc,
                                .accumulate = 1,
                                .label_smoothing = (float)pr->p->job->label_smoothing};
    for (int s = 0; s < n; s++) {
        fence(pr->be);
        double t = ddp_now();
        ddp_step_run(&st, pr->x, pr->y, pr->B, (uint64_t)s, pr->lr);
        const double ms = lap(pr->be, &t);
        if (part)
            part[(size_t)s * P_COUNT + P_WHOLE] = ms;
    }
}

/* A random batch in backend memory: samples uniform in [0, 1), labels uniform over K. */
static void make_batch(struct prof *pr, uint64_t seed)
{
    const struct ddp_model *m = pr->m;
    const size_t n = (size_t)pr->B * m->in_elems;
    float *hx = ddp_malloc(sizeof(float) * n);
    int32_t *hy = ddp_malloc(sizeof(int32_t) * (size_t)pr->B);
    struct ddp_rng r;
    ddp_rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++)
        hx[i] = (float)ddp_rng_uniform(&r);
    for (int i = 0; i < pr->B; i++)
        hy[i] = (int32_t)ddp_rng_below(&r, (uint64_t)m->classes);
    pr->x = pr->be->alloc(sizeof(float) * n);
    pr->y = pr->be->alloc(sizeof(int32_t) * (size_t)pr->B);
    pr->be->upload(pr->x, hx, sizeof(float) * n);
    pr->be->upload(pr->y, hy, sizeof(int32_t) * (size_t)pr->B);
    fence(pr->be);
    free(hx);
    free(hy);
}

/* The medians, and the sum of the rows: each layer's own work (its fused partners' calls do
 * nothing) and the parts of the step. */
static void summarise(struct prof *pr)
{
    pr->sum = 0;
    for (int i = 0; i < pr->L; i++) {
        pr->mfwd[i] = median(pr->fwd + i, pr->N, pr->L);
        pr->mbwd[i] = median(pr->bwd + i, pr->N, pr->L);
        pr->sum += ddp_model_runner(pr->m, i, 0) == i ? pr->mfwd[i] : 0;
        pr->sum += ddp_model_runner(pr->m, i, 1) == i ? pr->mbwd[i] : 0;
    }
    for (int k = 0; k < P_COUNT; k++) {
        pr->mpart[k] = median(pr->part + k, pr->N, P_COUNT);
        if (k < P_LAYERED && (k != P_INPUT || pr->m->xin))
            pr->sum += pr->mpart[k];
    }
}

/* Layer i's time one way as a cell: its median, "-" when nothing runs, "in N" when its fused
 * partner N runs it. Returns the runner. */
static int cell(const struct prof *pr, int i, int backward, char *buf, size_t len)
{
    const int r = ddp_model_runner(pr->m, i, backward);
    if (r == i)
        snprintf(buf, len, "%.3f", backward ? pr->mbwd[i] : pr->mfwd[i]);
    else if (r < 0)
        snprintf(buf, len, "-");
    else
        snprintf(buf, len, "in %s", pr->m->layers[r].pos);
    return r;
}

/* Layer i's note: whom its fused work runs in, whose work its own call runs. */
static void note_of(const struct prof *pr, int i, int fr, int br, char *buf, size_t len)
{
    const struct ddp_model *m = pr->m;
    size_t used = 0;
    buf[0] = 0;
    if (fr >= 0 && fr != i && (br == fr || br < 0))
        used = (size_t)snprintf(buf, len, "(fused into %s)", m->layers[fr].pos);
    else if (fr >= 0 && fr != i && br != i)
        used = (size_t)snprintf(buf, len, "(fused into %s forward, %s backward)", m->layers[fr].pos,
                                m->layers[br].pos);
    else if (fr >= 0 && fr != i)
        used = (size_t)snprintf(buf, len, "(forward fused into %s)", m->layers[fr].pos);
    else if (br >= 0 && br != i)
        used = (size_t)snprintf(buf, len, "(backward fused into %s)", m->layers[br].pos);
    for (int j = 0, n = 0; j < pr->L && used < len; j++) {
        if (j == i || (ddp_model_runner(m, j, 0) != i && ddp_model_runner(m, j, 1) != i))
            continue;
        used += (size_t)snprintf(buf + used, len - used, "%s%s",
                                 n++    ? ", "
                                 : used ? " (runs "
                                        : "(runs ",
                                 m->layers[j].pos);
    }
    if (strstr(buf, "(runs ") && used < len)
        snprintf(buf + used, len - used, ")");
}

/* Width of the position column: the longest position, at least "layer". */
static int pos_width(const struct prof *pr)
{
    int w = 5;
    for (int i = 0; i < pr->L; i++)
        if ((int)strlen(pr->m->layers[i].pos) > w)
            w = (int)strlen(pr->m->layers[i].pos);
    return w;
}

static double share(const struct prof *pr, double ms)
{
    return pr->sum > 0 ? 100.0 * ms / pr->sum : 0;
}

/* The header: job, device, batch, method. */
static void print_head(const struct prof *pr)
{
    const struct ddp_profile_setup *p = pr->p;
    printf("profile of %s (%s) on %s: batch %d, precision %s, %d warm-up and %d timed steps, "
           "medians\n",
           p->job->name, p->job->path, p->device, pr->B, ddp_job_precision_name(p->job->precision),
           p->warmup, pr->N);
    if (p->conv_path && p->conv_path[0])
        printf("convolutions: %s\n", p->conv_path);
    if (pr->be->sync)
        printf("timing: host clock around each layer, a device synchronisation after each: "
               "every row's time includes one synchronisation; CUDA graphs off\n");
    else
        printf("timing: host clock around each layer\n");
}

/* What the input row times: the copy to channels-last, to bf16 storage, or both. */
static const char *input_text(const struct ddp_model *m)
{
    if (!m->act16)
        return PART_TEXT[P_INPUT];
    return m->nhwc ? "the input to NHWC bf16" : "the input to bf16";
}

static void print_table(const struct prof *pr)
{
    const struct ddp_model *m = pr->m;
    const int pw = pos_width(pr);
    char what[96], f[64], b[64], note[256];
    print_head(pr);
    printf("\n%-*s  %-28s %10s %10s %7s\n", pw, "layer", "kind", "fwd", "bwd", "share");
    printf("%-*s  %-28s %10s %10s %7s\n", pw, "", "", "ms", "ms", "%");
    if (m->xin)
        printf("%-*s  %-28s %10.3f %10s %7.1f\n", pw, "input", input_text(m), pr->mpart[P_INPUT],
               "-", share(pr, pr->mpart[P_INPUT]));
    for (int i = 0; i < pr->L; i++) {
        ddp_model_layer_text(m, i, what, sizeof what);
        const int fr = cell(pr, i, 0, f, sizeof f), br = cell(pr, i, 1, b, sizeof b);
        const double own = (fr == i ? pr->mfwd[i] : 0) + (br == i ? pr->mbwd[i] : 0);
        note_of(pr, i, fr, br, note, sizeof note);
        printf("%-*s  %-28s %10s %10s %7.1f%s%s\n", pw, m->layers[i].pos, what, f, b,
               share(pr, own), note[0] ? "  " : "", note);
    }
    for (int k = P_ZERO; k < P_LAYERED; k++)
        printf("%-*s  %-28s %10.3f %10s %7.1f\n", pw, "-", PART_TEXT[k], pr->mpart[k], "",
               share(pr, pr->mpart[k]));
    printf("%-*s  %-28s %10.3f %10s %7.1f\n", pw, "", "sum of the rows", pr->sum, "", 100.0);
    printf("\nstep, one layer at a time: %.3f ms (median%s)\n", pr->mpart[P_LAYERED],
           pr->be->sync ? ", with the synchronisations" : "");
    printf("step, whole (the trainer's step%s): %.3f ms (median) = %.0f samples/s\n",
           pr->be->sync ? ", no per-layer synchronisation" : "", pr->mpart[P_WHOLE],
           pr->mpart[P_WHOLE] > 0 ? pr->B * 1e3 / pr->mpart[P_WHOLE] : 0.0);
}

/* "null" or the runner's position, as JSON. */
static void json_runner(FILE *f, const struct ddp_model *m, int r)
{
    char s[2 * DDP_MODEL_NAME_MAX];
    if (r < 0)
        fprintf(f, "null");
    else
        fprintf(f, "\"%s\"", ddp_json_str(m->layers[r].pos, s, sizeof s));
}

/* The layers' rows as a JSON array. */
static void json_layers(FILE *f, const struct prof *pr)
{
    const struct ddp_model *m = pr->m;
    char s[256], what[96];
    fprintf(f, "\"layers\":[");
    for (int i = 0; i < pr->L; i++) {
        const struct ddp_layer *l = &m->layers[i];
        const int fr = ddp_model_runner(m, i, 0), br = ddp_model_runner(m, i, 1);
        const double own = (fr == i ? pr->mfwd[i] : 0) + (br == i ? pr->mbwd[i] : 0);
        ddp_model_layer_text(m, i, what, sizeof what);
        fprintf(f, "%s{\"index\":%d,\"pos\":\"%s\",", i ? "," : "", i,
                ddp_json_str(l->pos, s, sizeof s));
        fprintf(f, "\"name\":\"%s\",", ddp_json_str(l->name, s, sizeof s));
        fprintf(f, "\"kind\":\"%s\",", ddp_json_str(what, s, sizeof s));
        fprintf(f, "\"fused\":%d,\"fwd_runner\":", l->fused);
        json_runner(f, m, fr);
        fprintf(f, ",\"bwd_runner\":");
        json_runner(f, m, br);
        fprintf(f, ",\"fwd_ms\":");
        fprintf(f, fr == i ? "%.6f" : "null", pr->mfwd[i]);
        fprintf(f, ",\"bwd_ms\":");
        fprintf(f, br == i ? "%.6f" : "null", pr->mbwd[i]);
        fprintf(f, ",\"share_pct\":%.4f}", share(pr, own));
    }
    fprintf(f, "]");
}

/* The same numbers as the table, one JSON object into path. Returns 0 or an exit code. */
static int write_json(const struct prof *pr, const char *path)
{
    const struct ddp_profile_setup *p = pr->p;
    struct ddp_atomic_file a;
    char s[1024], err[DDP_ERR_LEN + DDP_PATH_MAX];
    FILE *f = ddp_atomic_open(&a, path);
    if (!f) {
        ddp_warn("--json %s: cannot write: %s", path, strerror(errno));
        return DDP_EXIT_RUNTIME;
    }
    fprintf(f, "{\"job\":\"%s\",", ddp_json_str(p->job->name, s, sizeof s));
    fprintf(f, "\"device\":\"%s\",", ddp_json_str(p->device, s, sizeof s));
    fprintf(f, "\"convolutions\":\"%s\",",
            ddp_json_str(p->conv_path ? p->conv_path : "", s, sizeof s));
    fprintf(f, "\"precision\":\"%s\",\"channels_last\":%s,\"activations\":\"%s\",",
            ddp_job_precision_name(p->job->precision), pr->m->nhwc ? "true" : "false",
            pr->m->act16 ? "bf16" : "fp32");
    fprintf(f, "\"batch\":%d,\"warmup\":%d,\"steps\":%d,\"per_layer_sync\":%s,", pr->B, p->warmup,
            pr->N, pr->be->sync ? "true" : "false");
    json_layers(f, pr);
    for (int k = 0; k < P_COUNT; k++) {
        fprintf(f, ",\"%s_ms\":", PART_NAMES[k]);
        fprintf(f, k == P_INPUT && !pr->m->xin ? "null" : "%.6f", pr->mpart[k]);
    }
    fprintf(f, ",\"sum_ms\":%.6f,\"samples_per_s\":%.3f}\n", pr->sum,
            pr->mpart[P_WHOLE] > 0 ? pr->B * 1e3 / pr->mpart[P_WHOLE] : 0.0);
    if (ddp_atomic_close(&a, err, sizeof err) != 0) {
        ddp_warn("%s", err);
        return DDP_EXIT_RUNTIME;
    }
    return 0;
}

int ddp_profile_run(const struct ddp_profile_setup *p)
{
    struct prof pr = {.p = p, .m = p->model, .be = p->model->be};
    pr.B = (int)p->job->batch_size;
    pr.N = p->steps;
    pr.L = p->model->nlayers;
    pr.lr = ddp_optim_lr(p->optim, 0, 0, 1);
    pr.fwd = ddp_calloc((size_t)pr.N * (size_t)pr.L, sizeof(double));
    pr.bwd = ddp_calloc((size_t)pr.N * (size_t)pr.L, sizeof(double));
    pr.part = ddp_calloc((size_t)pr.N * P_COUNT, sizeof(double));
    pr.mfwd = ddp_calloc((size_t)pr.L, sizeof(double));
    pr.mbwd = ddp_calloc((size_t)pr.L, sizeof(double));
    make_batch(&pr, (uint64_t)p->job->seed);
    whole_steps(&pr, p->warmup, NULL);
    for (int s = 0; s < pr.N; s++)
        layered_step(&pr, s, (uint64_t)s);
    whole_steps(&pr, pr.N, pr.part);
    summarise(&pr);
    print_table(&pr);
    fflush(stdout);
    const int rc = p->json ? write_json(&pr, p->json) : 0;
    pr.be->free(pr.x);
    pr.be->free(pr.y);
    free(pr.fwd);
    free(pr.bwd);
    free(pr.part);
    free(pr.mfwd);
    free(pr.mbwd);
    return rc;
}
