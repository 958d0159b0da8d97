/*
 * graph.c - the training step as a CUDA graph (graph.h).
 */
#include "train/graph.h"

#include <string.h>

#include "core/util.h"

int ddp_graph_init(struct ddp_graph *g, const struct ddp_job *job, const struct ddp_backend *be,
                   char *err, size_t errlen)
{
    memset(g, 0, sizeof *g);
    g->batch = (int)job->batch_size;
    if (job->cuda_graph == DDP_CUDA_GRAPH_OFF)
        return 0;
    if (be->graph_launch && be->upload_batch && be->xent_acc) {
        g->enabled = 1;
        return 0;
    }
    if (job->cuda_graph == DDP_CUDA_GRAPH_ON)
        return ddp_err(err, errlen,
                       "%s: [train] cuda_graph = on: the step cannot be captured: the CPU "
                       "backend has no CUDA graphs; set cuda_graph = auto or off",
                       job->path);
    return 0;
}

/* Capture the micro-batch into the graph of `slot`. */
static void capture(struct ddp_graph *g, const struct ddp_step *s, const float *x, const int32_t *y,
                    int n, int slot, const struct ddp_graph_scalars *sc, double lr, int first,
                    int last)
{
    const struct ddp_backend *be = s->model->be;
    char err[DDP_ERR_LEN];
    if (be->graph_capture_begin(slot, sc, err, sizeof err) != 0)
        ddp_die("%s", err);
    ddp_step_micro(s, x, y, n, sc->noise, lr, first, last); /* recorded; the host's state moves */
    if (be->graph_capture_end(slot, err, sizeof err) != 0)
        ddp_die("%s; set [train] cuda_graph = off to run without graphs", err);
    g->ready[slot] = 1;
    g->captures++;
}

/* What a replayed micro-batch does to the host's state, as ddp_step_micro advances it: each
 * batchnorm layer's num_batches_tracked, and on the last the optimiser's step count. */
static void replayed(const struct ddp_step *s, int last)
{
    if (last)
        s->optim->t++;
    const struct ddp_model *m = s->model;
    for (int i = 0; i < m->nlayers; i++)
        if (m->layers[i].spec.kind == DDP_LAYER_BATCHNORM)
            m->layers[i].num_batches_tracked++;
}

double ddp_graph_micro(struct ddp_graph *g, const struct ddp_step *s, const float *x,
                       const int32_t *y, int n, int set, uint64_t noise, double lr, int first,
                       int last)
{
    const int K = s->accumulate > 1 ? s->accumulate : 1;
    if (!g->enabled || n != g->batch || set < 0 || set > 1 || !s->acc || (K > 1 && first && last))
        return ddp_step_micro(s, x, y, n, noise, lr, first, last);
    if (!g->warm) { /* the workspace and the communicator's pools grow in the first step */
        g->warm = last;
        return ddp_step_micro(s, x, y, n, noise, lr, first, last);
    }
    const int slot = set + 2 * (last ? 2 : first ? 0 : 1);
    struct ddp_graph_scalars sc;
    ddp_optim_scalars(s->optim, lr, &sc);
    sc.noise = noise;
    if (!g->ready[slot])
        capture(g, s, x, y, n, slot, &sc, lr, first, last);
    else
        replayed(s, last);
    s->model->be->graph_launch(slot, &sc);
    g->launches++;
    return 0;
}
