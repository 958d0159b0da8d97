/*
 * conv_dnn_report.cu - the cuDNN plans in words (see internal.cuh for the parts): one line per
 * convolution shape and batch size with each direction's algorithm, math, measured time and
 * workspace (a direction chosen from cuDNN's graph API: "engine N knobs TYPE=VALUE graph
 * API", then the legacy algorithm it was timed against and its time), and under [train]
 * deterministic = true what the non-deterministic algorithms (or engines) would gain
 * (ddp_cuda_conv_report, for the run log and `ddptrain check`). conv_dnn.cu makes the plans.
 */
#include "backend/cuda/internal.cuh"

#ifdef DDP_DNN
/* cuDNN's names of the algorithms of direction d (the legacy API's enums), without prefix. */
static const char *dnn_algo_name(int d, int algo)
{
    static const char *const fwd[] = {
        "IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT", "FFT_TILING",
        "WINOGRAD",      "WINOGRAD_NONFUSED"};
    static const char *const bwd_data[] = {"ALGO_0",     "ALGO_1",   "FFT",
                                           "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
    static const char *const bwd_filter[] = {
        "ALGO_0", "ALGO_1", "FFT", "ALGO_3", "WINOGRAD", "WINOGRAD_NONFUSED", "FFT_TILING"};
    const char *const *t = d == DNN_FWD ? fwd : d == DNN_BWD_DATA ? bwd_data : bwd_filter;
    const int n = d == DNN_FWD ? 8 : d == DNN_BWD_DATA ? 6 : 7;
    return algo >= 0 && algo < n ? t[algo] : "?";
}

static const char *dnn_math_name(cudnnMathType_t m)
{
    return m == CUDNN_FMA_MATH         ? "fma"
           : m == CUDNN_TENSOR_OP_MATH ? "tensor-op"
           : m == CUDNN_DEFAULT_MATH   ? "default"
                                       : "tensor-op-conversion";
}

/* A graph plan's knob choices in words: " knobs TYPE=VALUE,..." ("" where it has none). */
static void dnn_knobs_text(const struct dnn_graph *g, char *out, size_t len)
{
    int n = 0;
    out[0] = 0;
    for (int i = 0; i < g->nknobs && n >= 0 && (size_t)n < len; i++)
        n += snprintf(out + n, len - n, "%s%lld=%lld", i ? "," : " knobs ",
                      (long long)g->knob_type[i], (long long)g->knob_value[i]);
}

/* One line of ddp_cuda_conv_report for slot s of plan pl into out (at most len). */
static void dnn_report_slot(const struct dnn_plan *pl, const struct dnn_slot *s, char *out,
                            size_t len)
{
    const struct conv_geom *q = &pl->q;
    const int algo[DNN_DIRS] = {(int)s->fwd, (int)s->bwd_data, (int)s->bwd_filter};
    int n = snprintf(out, len, "C%d %dx%d -> %d k%d s%d p%d%s, batch %d:", q->C, q->H, q->W, q->O,
                     q->k, q->stride, q->pad, dnn_layout_tag(pl->layout, pl->act16), s->B);
    for (int d = 0; d < DNN_DIRS && n >= 0 && (size_t)n < len; d++) {
        char t[32] = "heuristic";
        if (s->how[d] == DNN_ADOPTED)
            snprintf(t, sizeof t, "adopted");
        if (s->how[d] == DNN_MEASURED)
            snprintf(t, sizeof t, "%.3f ms", s->ms[d]);
        if (s->how[d] != DNN_UNCHOSEN && s->g[d].plan) {
            char k[256];
            dnn_knobs_text(&s->g[d], k, sizeof k);
            n += snprintf(out + n, len - n, "%s %s engine %lld%s graph API %s", d ? "," : "",
                          dnn_dir_names[d], (long long)s->g[d].engine, k, t);
            if (s->how[d] == DNN_MEASURED && s->leg_ms[d] > 0 && n >= 0 && (size_t)n < len)
                n += snprintf(out + n, len - n, " (legacy %s %.3f ms)", dnn_algo_name(d, algo[d]),
                              s->leg_ms[d]);
        } else {
            n += snprintf(out + n, len - n, "%s %s %s %s %s", d ? "," : "", dnn_dir_names[d],
                          s->how[d] == DNN_UNCHOSEN ? "-" : dnn_algo_name(d, algo[d]),
                          dnn_math_name(s->math[d]), s->how[d] == DNN_UNCHOSEN ? "unused" : t);
        }
        if (s->how[d] == DNN_MEASURED && s->any_algo[d] >= 0 && n >= 0 && (size_t)n < len) {
            char a[48];
            if (s->any_graph[d])
                snprintf(a, sizeof a, "engine %d graph API", s->any_algo[d]);
            else
                snprintf(a, sizeof a, "%s", dnn_algo_name(d, s->any_algo[d]));
            n += snprintf(out + n, len - n, " (non-deterministic %s %.3f ms)", a, s->any_ms[d]);
        }
    }
    char ws[32];
    if (n >= 0 && (size_t)n < len)
        snprintf(out + n, len - n, "; workspace %s", ddp_fmt_bytes((double)pl->cap, ws, sizeof ws));
}
#endif

/* One line of what [train] deterministic = false would gain: over the timed directions of the
 * planned batch of every convolution shape (one call each, not weighted by how many layers
 * share a shape), the measured times kept against the same with the faster non-deterministic
 * algorithms. Returns 0, writing nothing, where the two differ by less than 5%. */
static int dnn_report_gain(char *out, size_t len)
{
    double kept = 0, any = 0;
    int B = 0;
    for (int i = 0; i < g_cuda.dnn.nplans; i++) {
        const struct dnn_slot *s = &g_cuda.dnn.plans[i].slot[0];
        for (int d = 0; s->B && d < DNN_DIRS; d++)
            if (s->how[d] == DNN_MEASURED) {
                kept += s->ms[d];
                any += s->any_algo[d] >= 0 ? s->any_ms[d] : s->ms[d];
                B = s->B;
            }
    }
    if (any >= kept * 0.95) /* within timing noise: not worth a line */
        return 0;
    snprintf(out, len,
             "non-deterministic algorithms measured %.3f ms against %.3f ms over one call of each "
             "shape at batch %d (%.0f%% less): [train] deterministic = false would take them, "
             "at the cost of bitwise repeatable results",
             any, kept, B, 100.0 * (1.0 - any / kept));
    return 1;
}

extern "C" int ddp_cuda_conv_report(char *out, size_t len)
{
    int lines = 0;
    size_t used = 0;
    if (len)
        out[0] = 0;
#ifdef DDP_DNN
    for (int i = 0; g_cuda.dnn.mode == 1 && i < g_cuda.dnn.nplans; i++)
        for (int j = 0; j < DNN_SLOTS; j++) {
            const struct dnn_slot *s = &g_cuda.dnn.plans[i].slot[j];
            if (!s->B || used + 2 >= len)
                continue;
            if (lines++)
                out[used++] = '\n';
            dnn_report_slot(&g_cuda.dnn.plans[i], s, out + used, len - used);
            used += strlen(out + used);
        }
    if (lines && used + 2 < len && dnn_report_gain(out + used + 1, len - used - 1)) {
        out[used] = '\n';
        lines++;
    }
#else
    (void)used;
#endif
    return lines;
}
