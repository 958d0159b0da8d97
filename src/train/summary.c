/*
 * summary.c - the summary of `ddptrain check` (see summary.h). The setup itself is the
 * trainer's (train.c); this file only measures and prints what setup built.
 *
 * Dimension letters: B per-rank batch, W world size, K classes.
 */
#include "train/summary.h"

#include <stdio.h>
#include <string.h>

#include "backend/select.h"
#include "train/optim.h"
#include "train/outdir.h"
#include "core/util.h"

double ddp_model_flops_per_sample(const struct ddp_model *m)
{
    double flops = 0;
    for (int i = 0; i < m->nlayers; i++) {
        const struct ddp_layer *l = &m->layers[i];
        double out = (double)l->out_elems, in = (double)l->in_elems;
        switch (l->spec.kind) {
        case DDP_LAYER_LINEAR:
            flops += 2.0 * in * out;
            break;
        case DDP_LAYER_CONV2D: /* every output element: C_in * k * k multiply-adds */
            flops += 2.0 * out * l->ishape[0] * l->spec.k * l->spec.k;
            break;
        case DDP_LAYER_MAXPOOL:
        case DDP_LAYER_AVGPOOL:
        case DDP_LAYER_GLOBALAVGPOOL:
            flops += in;
            break;
        case DDP_LAYER_RESIDUAL: /* the join adds body and shortcut */
            flops += out;
            break;
        case DDP_LAYER_BATCHNORM:
            flops += 4.0 * out;
            break;
        case DDP_LAYER_RELU:
        case DDP_LAYER_DROPOUT:
            flops += out;
            break;
        default:
            break;
        }
    }
    return flops;
}

/* "1.23 G" style, for FLOPs. */
static const char *si(double v, char *buf, size_t len)
{
    static const char *unit[] = {"", "k", "M", "G", "T", "P"};
    int u = 0;
    while (v >= 1000 && u < 5) {
        v /= 1000;
        u++;
    }
    snprintf(buf, len, "%.3g %s", v, unit[u]);
    return buf;
}

/* What the output directory holds and what the run would do with it. */
static void print_output(const struct ddp_check_facts *f)
{
    const struct ddp_job *job = f->job;
    const char *what = "empty or new: the run starts there";
    if (f->resumed)
        what = "the run resumes there and appends to metrics.jsonl";
    else if (ddp_outdir_has_run(job->output))
        what = "holds an earlier run: its files would be moved to previous-<time>/";
    printf("  output        %s (%s; free to lock)\n", job->output, what);
}

/* The recipe keys (docs/training.md, Recipes) and the validation split. */
static void print_recipe(const struct ddp_check_facts *f)
{
    const struct ddp_job *job = f->job;
    printf("  recipe        augment %s, normalize %s, accumulate %lld (optimiser steps of %lld "
           "samples), label_smoothing %g, clip_grad_norm %g\n",
           job->augment[0] ? job->augment : "none", job->normalize[0] ? job->normalize : "none",
           (long long)job->accumulate,
           (long long)(job->accumulate * job->batch_size * f->world->world_size),
           job->label_smoothing, job->clip_grad_norm);
    if (f->val_n > 0)
        printf("  validation    %lld samples (%s), keep_best %s, early_stop %lld\n",
               (long long)f->val_n,
               job->data_val[0] ? job->data_val : "held out of the training split by the seed",
               job->keep_best == DDP_KEEP_BEST_LOSS  ? "val_loss"
               : job->keep_best == DDP_KEEP_BEST_ACC ? "val_acc"
                                                     : "none",
               (long long)job->early_stop);
    else
        printf("  validation    none ([data] val, val_fraction)\n");
}

/* GPU: the convolution path and, with cuDNN, each shape's algorithms, math, times and
 * workspace as the build chose them (the run log's "conv" lines). */
static void print_convolutions(const struct ddp_check_facts *f)
{
    if (!f->conv_path || !f->conv_path[0])
        return;
    printf("  convolutions  %s\n", f->conv_path);
    char rep[16384];
    if (ddp_backend_conv_report(rep, sizeof rep) == 0)
        return;
    for (char *sv = NULL, *line = strtok_r(rep, "\n", &sv); line; line = strtok_r(NULL, "\n", &sv))
        printf("                %s\n", line);
}

int ddp_check_print(const struct ddp_check_facts *f)
{
    if (f->world->rank != 0)
        return 0;
    const struct ddp_job *job = f->job;
    const struct ddp_world *w = f->world;
    const struct ddp_model *m = f->model;
    int64_t G = job->batch_size * w->world_size;
    struct ddp_model_mem mem;
    ddp_model_memory(m, (int)job->batch_size, &mem);
    char a[32], b[32], c[32], d[32], desc[2048];
    ddp_model_describe(m, desc, sizeof desc);
    double flops = ddp_model_flops_per_sample(m);
    printf("ddptrain check: %s - the job is ready to run\n", job->path);
    printf("  world         %d rank%s on %d node%s, launcher %s, comm %s, device %s, %d "
           "thread%s per rank\n",
           w->world_size, w->world_size > 1 ? "s" : "", w->num_nodes, w->num_nodes > 1 ? "s" : "",
           ddp_launcher_name(w->launcher), f->comm, f->device, f->threads,
           f->threads > 1 ? "s" : "");
    printf("  data          %s: %s %lld samples, %s %lld\n", job->data_file, job->data_train,
           (long long)f->train_n, job->data_test[0] ? job->data_test : "(no test split)",
           (long long)f->test_n);
    printf("  model         %s\n", desc);
    printf("  parameters    %zu (%s as float32), %d all-reduce bucket%s\n", m->nparams,
           ddp_fmt_bytes(4.0 * (double)m->nparams, a, sizeof a), f->nbuckets,
           f->nbuckets > 1 ? "s" : "");
    printf("  FLOPs         %sFLOP per sample forward, about %sFLOP per training step per "
           "rank (forward + backward, batch %lld)\n",
           si(flops, b, sizeof b), si(3.0 * flops * (double)job->batch_size, c, sizeof c),
           (long long)job->batch_size);
    char e[32];
    printf("  memory        %s per rank: parameters, gradients and optimiser state %s, "
           "activations %s (%s without the memory plan's reuse), conv scratch %s\n",
           ddp_fmt_bytes(mem.total, a, sizeof a), ddp_fmt_bytes(mem.params, b, sizeof b),
           ddp_fmt_bytes(mem.activations, c, sizeof c), ddp_fmt_bytes(mem.unshared, e, sizeof e),
           ddp_fmt_bytes(mem.scratch, d, sizeof d));
    print_convolutions(f);
    int64_t total = f->steps_per_epoch * job->epochs;
    if (job->max_steps > 0 && job->max_steps < total)
        total = job->max_steps;
    printf("  steps         %lld per epoch of global batch %lld, %lld epoch%s, %lld steps in "
           "all\n",
           (long long)f->steps_per_epoch, (long long)G, (long long)job->epochs,
           job->epochs > 1 ? "s" : "", (long long)total);
    print_recipe(f);
    if (f->resumed)
        printf("  resume        from step %lld (epoch %lld, %lld samples into it)\n",
               (long long)f->start->step, (long long)f->start->epoch + 1,
               (long long)f->start->cursor);
    else
        printf("  resume        none: starts at step 0 ([checkpoint] resume = %s)\n", job->resume);
    print_output(f);
    printf("  setup took    %.3fs\n", f->setup_s);
    fflush(stdout);
    return 0;
}
