/*
 * conv_dnn_text.cu - the cuDNN plans' choices as text (see internal.cuh for the parts): rank
 * 0's to the other ranks, a checkpoint's (`conv_algorithms`) to the run that resumes it
 * (ddp_cuda_conv_choices writes it, ddp_cuda_conv_adopt takes it back). conv_dnn.cu makes the
 * plans and chooses; conv_graph.cu rebuilds a graph API choice.
 *
 * The text: a first line "ddptrain-conv-algorithms 1; cuDNN 9.x.y; DEVICE", then one line per
 * plan and batch size of whole numbers separated by one blank:
 *   C H W O k stride pad batch tf32 det, then algorithm and math of forward, backward data and
 *   backward filter (the legacy API's enum values; -1 -1: not chosen yet, or a graph choice)
 *   [layout: 1 NHWC, 0 NCHW] [storage: 1 bf16, 0 fp32]
 *   [G, then G groups "D E K T1 V1 ... TK VK": direction D (0 forward, 1 backward data,
 *    2 backward filter) chosen from cuDNN's graph API as the engine of global index E with
 *    K knob choices (knob type, value: cudnnBackendKnobType_t, int64)].
 * Lines of 16 numbers are NCHW fp32 (as every line before channels-last existed), of 17 fp32
 * (before bf16 storage); a line with a graph choice always writes both and then G (1 to 3).
 * Lines without a graph choice are written as before the graph API existed, so text from
 * either version loads in the other where it names no graph choice. A direction is taken only
 * where it qualifies in this process (its algorithm, or its engine, knobs and plan rebuilt
 * within the plan's workspace, allowed by this run's math and determinism); anything else
 * leaves this process's own choice.
 */
#include "backend/cuda/internal.cuh"

#include <ctype.h>
#include <errno.h>
#include <limits.h>

#ifdef DDP_DNN
#define DNN_TEXT_FORMAT "ddptrain-conv-algorithms 1"
/* Numbers one line may hold: 18, G, and three groups of D E K and DNN_KNOBS pairs. */
#define DNN_TEXT_NUMS (19 + DNN_DIRS * (3 + 2 * DNN_KNOBS))
/* Bytes of the longest line: each number at most 20 characters (an int64 with its sign) and a
 * blank, so no line is ever cut (dnn_text_line's offsets stay within it); the first line's
 * device name is cut to fit. */
#define DNN_TEXT_LINE (DNN_TEXT_NUMS * 21 + 1)

/* The first line of ddp_cuda_conv_choices for this process: format, cuDNN, device. */
static void dnn_text_head(char *out, size_t len)
{
    char v[32];
    dnn_version(v, sizeof v);
    snprintf(out, len, DNN_TEXT_FORMAT "; cuDNN %s; %s", v, g_cuda.devname);
}

/* The graph groups of a line (v[19...], g of them, n numbers in all) taken into slot s: the
 * directions taken. Malformed groups: none taken. */
static int dnn_adopt_graph(const struct dnn_plan *pl, struct dnn_slot *s, const long long *v, int g,
                           int n)
{
    int taken = 0;
    for (int i = 19, j = 0; j < g; j++) {
        if (i + 3 > n)
            return taken;
        const long long d = v[i], e = v[i + 1], k = v[i + 2];
        if (d < 0 || d >= DNN_DIRS || e < 0 || k < 0 || k > DNN_KNOBS || i + 3 + 2 * k > n)
            return taken;
        int64_t type[DNN_KNOBS], value[DNN_KNOBS];
        for (int m = 0; m < k; m++) {
            type[m] = v[i + 3 + 2 * m];
            value[m] = v[i + 4 + 2 * m];
        }
        if (dnn_graph_adopt(pl, s, (int)d, e, (int)k, type, value, pl->cap) == 0)
            taken++; /* else this process's own stays */
        i += 3 + 2 * (int)k;
    }
    return taken;
}

/* Take one line of ddp_cuda_conv_choices (v: its n numbers, the layout and storage filled in
 * where the line has none): the directions taken. A plan of another layout or storage never
 * takes it. */
static int dnn_adopt_line(const long long *v, int n)
{
    for (int i = 0; i < 18; i++)
        if (v[i] < INT_MIN || v[i] > INT_MAX)
            return 0;
    const struct conv_geom want = {(int)v[0], (int)v[1], (int)v[2], (int)v[3],
                                   (int)v[4], (int)v[5], (int)v[6]};
    struct dnn_plan *pl = dnn_find(&want, (int)v[16], v[17] == DDP_ACT_BF16);
    const long long B = v[7];
    if (!pl || B < 1 || B > pl->slot[0].B || v[8] != dnn_tensor_math() || v[9] != g_cuda.dnn.det)
        return 0; /* not a shape, batch size or mode of this run */
    struct dnn_slot *s = dnn_slot_for(pl, (int)B);
    int taken = 0;
    for (int d = 0; d < DNN_DIRS; d++) {
        const long long algo = v[10 + 2 * d], math = v[11 + 2 * d];
        if (algo < 0 || algo >= 16 || math < 0 || math > 3)
            continue;
        if (dnn_adopt_legacy(pl, s, d, (int)algo, (int)math) == 0) /* else this process's own */
            taken++;
    }
    if (n > 18)
        taken += dnn_adopt_graph(pl, s, v, (int)v[18], n);
    return taken;
}

/* The numbers of one line into v (DNN_TEXT_NUMS entries): whole numbers separated by one
 * blank, the line ending after them; 16 at least, the 17th a layout (0, 1), the 18th a
 * storage (0, 1), the 19th a count of graph groups (1 to DNN_DIRS). v[16] and v[17] are NCHW
 * and fp32 where the line has none. Returns how many, or 0 when the line is not one. */
static int dnn_parse_line(const char *p, long long *v)
{
    v[16] = DDP_LAYOUT_NCHW;
    v[17] = DDP_ACT_FP32;
    int n = 0;
    while (n < DNN_TEXT_NUMS) {
        char *end;
        if (!isdigit((unsigned char)*p) && *p != '-')
            return 0;
        errno = 0;
        const long long x = strtoll(p, &end, 10);
        if (end == p || errno)
            return 0;
        v[n++] = x;
        p = end;
        if (*p == '\n' || *p == 0)
            break;
        if (*p++ != ' ')
            return 0;
    }
    if ((*p != '\n' && *p != 0) || n < 16 || (n == 18 + 1))
        return 0;
    if (n >= 17 && v[16] != DDP_LAYOUT_NCHW && v[16] != DDP_LAYOUT_NHWC)
        return 0;
    if (n >= 18 && v[17] != DDP_ACT_FP32 && v[17] != DDP_ACT_BF16)
        return 0;
    if (n > 18 && (v[18] < 1 || v[18] > DNN_DIRS))
        return 0;
    return n;
}

/* Slot s of plan pl as one line (without its newline) into line (len). */
static void dnn_text_line(const struct dnn_plan *pl, const struct dnn_slot *s, char *line,
                          size_t len)
{
    const struct conv_geom *q = &pl->q;
    const int algo[DNN_DIRS] = {(int)s->fwd, (int)s->bwd_data, (int)s->bwd_filter};
    int graphs = 0;
    int n = snprintf(line, len, "%d %d %d %d %d %d %d %d %d %d", q->C, q->H, q->W, q->O, q->k,
                     q->stride, q->pad, s->B, s->tf32, s->det);
    for (int d = 0; d < DNN_DIRS; d++) {
        const int none = s->how[d] == DNN_UNCHOSEN || s->g[d].plan;
        graphs += s->how[d] != DNN_UNCHOSEN && s->g[d].plan;
        n +=
            snprintf(line + n, len - n, " %d %d", none ? -1 : algo[d], none ? -1 : (int)s->math[d]);
    }
    /* NCHW fp32 lines stay as they always were, NHWC fp32 ones too */
    if (pl->act16 || graphs)
        n += snprintf(line + n, len - n, " %d %d", pl->layout, pl->act16 ? DDP_ACT_BF16 : 0);
    else if (pl->layout == DDP_LAYOUT_NHWC)
        n += snprintf(line + n, len - n, " %d", DDP_LAYOUT_NHWC);
    if (graphs)
        n += snprintf(line + n, len - n, " %d", graphs);
    for (int d = 0; graphs && d < DNN_DIRS; d++) {
        const struct dnn_graph *g = &s->g[d];
        if (s->how[d] == DNN_UNCHOSEN || !g->plan)
            continue;
        n += snprintf(line + n, len - n, " %d %lld %d", d, (long long)g->engine, g->nknobs);
        for (int k = 0; k < g->nknobs; k++)
            n += snprintf(line + n, len - n, " %lld %lld", (long long)g->knob_type[k],
                          (long long)g->knob_value[k]);
    }
}
#endif

extern "C" size_t ddp_cuda_conv_choices(char *out, size_t len)
{
    if (len)
        out[0] = 0;
#ifdef DDP_DNN
    if (g_cuda.dnn.mode != 1 || len < 2)
        return 0;
    char line[DNN_TEXT_LINE];
    dnn_text_head(line, sizeof line);
    size_t used = 0;
    for (int i = -1; i < g_cuda.dnn.nplans; i++)
        for (int j = 0; j < (i < 0 ? 1 : DNN_SLOTS); j++) {
            const struct dnn_plan *pl = i < 0 ? NULL : &g_cuda.dnn.plans[i];
            const struct dnn_slot *s = pl ? &pl->slot[j] : NULL;
            if (s && !s->B)
                continue;
            if (s)
                dnn_text_line(pl, s, line, sizeof line);
            const size_t n = strlen(line);
            if (used + n + 2 > len)
                return used;
            memcpy(out + used, line, n);
            used += n;
            out[used++] = '\n';
            out[used] = 0;
        }
    return used;
#else
    return 0;
#endif
}

extern "C" int ddp_cuda_conv_adopt(const char *text, int same_device, char *why, size_t whylen)
{
#ifdef DDP_DNN
    if (g_cuda.dnn.mode != 1)
        return 0;
    char head[512];
    dnn_text_head(head, sizeof head);
    const char *nl = strchr(text, '\n');
    const size_t hn = nl ? (size_t)(nl - text) : strlen(text);
    if (strncmp(text, DNN_TEXT_FORMAT ";", sizeof DNN_TEXT_FORMAT) != 0)
        return ddp_err(why, whylen, "not a list of convolution algorithms");
    if (same_device && (hn != strlen(head) || strncmp(text, head, hn) != 0)) {
        const size_t skip = hn > sizeof DNN_TEXT_FORMAT ? sizeof DNN_TEXT_FORMAT + 1 : hn;
        return ddp_err(why, whylen, "chosen with %.*s; this process runs %s",
                       (int)(hn - skip > 200 ? 200 : hn - skip), text + skip,
                       head + sizeof DNN_TEXT_FORMAT + 1);
    }
    int taken = 0;
    for (const char *p = nl ? nl + 1 : text + hn; *p;) {
        long long v[DNN_TEXT_NUMS];
        const char *end = strchr(p, '\n');
        const int n = dnn_parse_line(p, v);
        if (n)
            taken += dnn_adopt_line(v, n);
        if (!end)
            break;
        p = end + 1;
    }
    return taken;
#else
    (void)text, (void)same_device, (void)why, (void)whylen;
    return 0;
#endif
}
