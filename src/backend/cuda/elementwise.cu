/*
 * elementwise.cu - the CUDA backend's elementwise ops (see internal.cuh for the parts): relu,
 * dropout (also as captured in a CUDA graph), scale, the residual join fused with the relu
 * after it (add_relu_fwd, relu_bwd_join), and for linear and conv2d the bias broadcast and the
 * fused bias + relu epilogue. One thread per element, grid-stride loops.
 * Every op but scale reads and writes activations in the storage in force (g_cuda.act16): fp32
 * on float4 vectors where aligned, bf16 on 8-value vectors where aligned (bf16x8, internal.cuh),
 * else one element at a time (act_ld, float arithmetic as the fp32 kernels, act_st); dropout's
 * mask and the biases stay fp32.
 * It leaves the GEMMs and convolutions to blas.cu and conv.cu, the graphs' values to graph.cu.
 */
#include "backend/cuda/internal.cuh"

/* ---- kernels ------------------------------------------------------------------------------ */

__global__ void k_scale(float *x, size_t n, float a)
{
    GRID_STRIDE(i, n) x[i] *= a;
}

/* out (rows, O*inner): every element of feature o = (idx / inner) % O gets b[o]. */
template <typename A>
__global__ void k_fill_bias(A *out, const float *b, size_t n, int O, int inner)
{
    GRID_STRIDE(i, n) out[i] = act_st<A>(b[(i / (size_t)inner) % (size_t)O]);
}

__device__ __forceinline__ float relu1(float v)
{
    return v > 0 ? v : 0;
}

__device__ __forceinline__ float relu_grad(float y, float dy)
{
    return y > 0 ? dy : 0;
}

/* The element-wise functions of the vector instances (internal.cuh map1_8, map2_8). */
struct op_relu {
    __device__ float operator()(float v) const
    {
        return relu1(v);
    }
};
struct op_relu_grad { /* (y, dy): the relu's output, its gradient */
    __device__ float operator()(float y, float dy) const
    {
        return relu_grad(y, dy);
    }
};
struct op_mul {
    __device__ float operator()(float x, float m) const
    {
        return x * m;
    }
};
struct op_add_relu {
    __device__ float operator()(float a, float b) const
    {
        return relu1(a + b);
    }
};

/* relu over n4 float4 vectors, then the n % 4 tail (from element 4 n4) one at a time. */
__global__ void k_relu_fwd(float *out, const float *inp, size_t n)
{
    const size_t n4 = n / 4;
    float4 *o4 = (float4 *)out;
    const float4 *i4 = (const float4 *)inp;
    GRID_STRIDE(i, n4)
    {
        const float4 v = i4[i];
        float4 r;
        r.x = relu1(v.x);
        r.y = relu1(v.y);
        r.z = relu1(v.z);
        r.w = relu1(v.w);
        o4[i] = r;
    }
    GRID_STRIDE(t, n - 4 * n4) out[4 * n4 + t] = relu1(inp[4 * n4 + t]);
}

/* Any storage, one element at a time (bf16 activations, or pointers not 16-byte aligned). */
template <typename A> __global__ void k_relu_fwd1(A *out, const A *inp, size_t n)
{
    GRID_STRIDE(i, n) out[i] = act_st<A>(relu1(act_ld(inp[i])));
}

/* k_relu_fwd1<bf16> on n / 8 vectors of 8, then the n % 8 tail one at a time. */
__global__ void k_relu_fwd8(bf16 *out, const bf16 *inp, size_t n)
{
    map1_8(out, inp, n, op_relu());
}

__global__ void k_relu_bwd(float *dinp, const float *dout, const float *out, size_t n)
{
    const size_t n4 = n / 4;
    GRID_STRIDE(i, n4)
    {
        const float4 y = ((const float4 *)out)[i], dy = ((const float4 *)dout)[i];
        float4 r;
        r.x = relu_grad(y.x, dy.x);
        r.y = relu_grad(y.y, dy.y);
        r.z = relu_grad(y.z, dy.z);
        r.w = relu_grad(y.w, dy.w);
        ((float4 *)dinp)[i] = r;
    }
    GRID_STRIDE(t, n - 4 * n4)
    {
        const size_t i = 4 * n4 + t;
        dinp[i] = relu_grad(out[i], dout[i]);
    }
}

template <typename A> __global__ void k_relu_bwd1(A *dinp, const A *dout, const A *out, size_t n)
{
    GRID_STRIDE(i, n) dinp[i] = act_st<A>(relu_grad(act_ld(out[i]), act_ld(dout[i])));
}

__global__ void k_relu_bwd8(bf16 *dinp, const bf16 *dout, const bf16 *out, size_t n)
{
    map2_8(dinp, out, dout, n, op_relu_grad());
}

/* The mask stays fp32 whatever the storage of out and inp. */
template <typename A>
__global__ void k_dropout_fwd(A *out, float *mask, const A *inp, size_t n, double p, float keep,
                              uint64_t seed)
{
    GRID_STRIDE(i, n)
    {
        const float m = ddp_uniform01(seed, i) >= p ? keep : 0.0f;
        mask[i] = m;
        out[i] = act_st<A>(act_ld(inp[i]) * m);
    }
}

template <typename A> __global__ void k_mul(A *dinp, const A *dout, const float *mask, size_t n)
{
    GRID_STRIDE(i, n) dinp[i] = act_st<A>(act_ld(dout[i]) * mask[i]);
}

/* k_dropout_fwd<bf16> and k_dropout_graph<bf16> on vectors of 8 (the mask two float4), the
 * n % 8 tail one at a time; sc non-NULL: the seed is sc->noise ^ seed (a captured step). */
__global__ void k_dropout_fwd8(bf16 *out, float *mask, const bf16 *inp, size_t n, double p,
                               float keep, uint64_t seed, const graph_vals *sc)
{
    const uint64_t s = sc ? sc->noise ^ seed : seed;
    const size_t n8 = n / 8;
    GRID_STRIDE(i, n8)
    {
        float x[8], m[8];
        act_ld8(x, inp, i);
        for (int j = 0; j < 8; j++) {
            m[j] = ddp_uniform01(s, 8 * i + j) >= p ? keep : 0.0f;
            x[j] = x[j] * m[j];
        }
        act_st8(mask, i, m);
        act_st8(out, i, x);
    }
    GRID_STRIDE(t, n - 8 * n8)
    {
        const size_t i = 8 * n8 + t;
        const float m = ddp_uniform01(s, i) >= p ? keep : 0.0f;
        mask[i] = m;
        out[i] = act_st<bf16>(act_ld(inp[i]) * m);
    }
}

/* k_mul<bf16> on vectors of 8, then the tail. */
__global__ void k_mul8(bf16 *dinp, const bf16 *dout, const float *mask, size_t n)
{
    map2_8(dinp, dout, mask, n, op_mul());
}

static void cuda_relu_fwd(float *out, const float *inp, size_t n)
{
    if (!n)
        return;
    const void *p[] = {out, inp};
    if (g_cuda.act16 && vec4_ok(p, 2))
        LAUNCH(k_relu_fwd8, blocks_for((n + 7) / 8), THREADS, (bf16 *)out, (const bf16 *)inp, n);
    else if (g_cuda.act16)
        LAUNCH(k_relu_fwd1<bf16>, blocks_for(n), THREADS, (bf16 *)out, (const bf16 *)inp, n);
    else if (vec4_ok(p, 2))
        LAUNCH(k_relu_fwd, blocks_for((n + 3) / 4), THREADS, out, inp, n);
    else
        LAUNCH(k_relu_fwd1<float>, blocks_for(n), THREADS, out, inp, n);
}

static void cuda_relu_bwd(float *dinp, const float *dout, const float *out, size_t n)
{
    if (!n)
        return;
    const void *p[] = {dinp, dout, out};
    if (g_cuda.act16 && vec4_ok(p, 3))
        LAUNCH(k_relu_bwd8, blocks_for((n + 7) / 8), THREADS, (bf16 *)dinp, (const bf16 *)dout,
               (const bf16 *)out, n);
    else if (g_cuda.act16)
        LAUNCH(k_relu_bwd1<bf16>, blocks_for(n), THREADS, (bf16 *)dinp, (const bf16 *)dout,
               (const bf16 *)out, n);
    else if (vec4_ok(p, 3))
        LAUNCH(k_relu_bwd, blocks_for((n + 3) / 4), THREADS, dinp, dout, out, n);
    else
        LAUNCH(k_relu_bwd1<float>, blocks_for(n), THREADS, dinp, dout, out, n);
}

/* ---- residual join + relu ---------------------------------------------------------------- */

/* out = relu(a + b) on float4 vectors, the n % 4 tail one at a time: k_add's sum, then relu1. */
__global__ void k_add_relu(float *out, const float *a, const float *b, size_t n)
{
    const size_t n4 = n / 4;
    GRID_STRIDE(i, n4)
    {
        const float4 x = ((const float4 *)a)[i], y = ((const float4 *)b)[i];
        float4 r;
        r.x = relu1(x.x + y.x);
        r.y = relu1(x.y + y.y);
        r.z = relu1(x.z + y.z);
        r.w = relu1(x.w + y.w);
        ((float4 *)out)[i] = r;
    }
    GRID_STRIDE(t, n - 4 * n4) out[4 * n4 + t] = relu1(a[4 * n4 + t] + b[4 * n4 + t]);
}

template <typename A> __global__ void k_add_relu1(A *out, const A *a, const A *b, size_t n)
{
    GRID_STRIDE(i, n) out[i] = act_st<A>(relu1(act_ld(a[i]) + act_ld(b[i])));
}

__global__ void k_add_relu8(bf16 *out, const bf16 *a, const bf16 *b, size_t n)
{
    map2_8(out, a, b, n, op_add_relu());
}

/* One join input's gradient d (NULL: none) at element i gets g: added (acc, k_add's d + g) or
 * stored. */
template <typename A> __device__ __forceinline__ void join_grad1(A *d, int acc, size_t i, float g)
{
    if (d)
        d[i] = act_st<A>(acc ? act_ld(d[i]) + g : g);
}

/* join_grad1 on float4 vector i. */
__device__ __forceinline__ void join_grad4(float *d, int acc, size_t i, float4 g)
{
    if (!d)
        return;
    if (acc) {
        const float4 o = ((const float4 *)d)[i];
        g.x = o.x + g.x;
        g.y = o.y + g.y;
        g.z = o.z + g.z;
        g.w = o.w + g.w;
    }
    ((float4 *)d)[i] = g;
}

/* The relu's input gradient into both join inputs' gradients (backend.h relu_bwd_join), float4
 * vectors then the n % 4 tail; da before db per element, so one buffer for both adds twice. */
__global__ void k_relu_bwd_join(float *da, int acc_a, float *db, int acc_b, const float *dout,
                                const float *out, size_t n)
{
    const size_t n4 = n / 4;
    GRID_STRIDE(i, n4)
    {
        const float4 y = ((const float4 *)out)[i], dy = ((const float4 *)dout)[i];
        float4 g;
        g.x = relu_grad(y.x, dy.x);
        g.y = relu_grad(y.y, dy.y);
        g.z = relu_grad(y.z, dy.z);
        g.w = relu_grad(y.w, dy.w);
        join_grad4(da, acc_a, i, g);
        join_grad4(db, acc_b, i, g);
    }
    GRID_STRIDE(t, n - 4 * n4)
    {
        const size_t i = 4 * n4 + t;
        const float g = relu_grad(out[i], dout[i]);
        join_grad1(da, acc_a, i, g);
        join_grad1(db, acc_b, i, g);
    }
}

template <typename A>
__global__ void k_relu_bwd_join1(A *da, int acc_a, A *db, int acc_b, const A *dout, const A *out,
                                 size_t n)
{
    GRID_STRIDE(i, n)
    {
        const float g = relu_grad(act_ld(out[i]), act_ld(dout[i]));
        join_grad1(da, acc_a, i, g);
        join_grad1(db, acc_b, i, g);
    }
}

/* join_grad1 on bf16 vector i. */
__device__ __forceinline__ void join_grad8(bf16 *d, int acc, size_t i, const float g[8])
{
    if (!d)
        return;
    float v[8];
    if (acc) {
        act_ld8(v, d, i);
        for (int j = 0; j < 8; j++)
            v[j] = v[j] + g[j];
    } else {
        for (int j = 0; j < 8; j++)
            v[j] = g[j];
    }
    act_st8(d, i, v);
}

/* k_relu_bwd_join1<bf16> on vectors of 8, then the tail; da's vector before db's, so one
 * buffer for both adds twice, as there. */
__global__ void k_relu_bwd_join8(bf16 *da, int acc_a, bf16 *db, int acc_b, const bf16 *dout,
                                 const bf16 *out, size_t n)
{
    const size_t n8 = n / 8;
    GRID_STRIDE(i, n8)
    {
        float y[8], dy[8];
        act_ld8(y, out, i);
        act_ld8(dy, dout, i);
        for (int j = 0; j < 8; j++)
            y[j] = relu_grad(y[j], dy[j]);
        join_grad8(da, acc_a, i, y);
        join_grad8(db, acc_b, i, y);
    }
    GRID_STRIDE(t, n - 8 * n8)
    {
        const size_t i = 8 * n8 + t;
        const float g = relu_grad(act_ld(out[i]), act_ld(dout[i]));
        join_grad1(da, acc_a, i, g);
        join_grad1(db, acc_b, i, g);
    }
}

static void cuda_add_relu_fwd(float *out, const float *a, const float *b, size_t n)
{
    if (!n)
        return;
    const void *p[] = {out, a, b};
    if (g_cuda.act16 && vec4_ok(p, 3))
        LAUNCH(k_add_relu8, blocks_for((n + 7) / 8), THREADS, (bf16 *)out, (const bf16 *)a,
               (const bf16 *)b, n);
    else if (g_cuda.act16)
        LAUNCH(k_add_relu1<bf16>, blocks_for(n), THREADS, (bf16 *)out, (const bf16 *)a,
               (const bf16 *)b, n);
    else if (vec4_ok(p, 3))
        LAUNCH(k_add_relu, blocks_for((n + 3) / 4), THREADS, out, a, b, n);
    else
        LAUNCH(k_add_relu1<float>, blocks_for(n), THREADS, out, a, b, n);
}

static void cuda_relu_bwd_join(float *da, int acc_a, float *db, int acc_b, const float *dout,
                               const float *out, size_t n)
{
    if (!n || (!da && !db))
        return;
    const void *p[] = {da, db, dout, out};
    if (g_cuda.act16 && vec4_ok(p, 4))
        LAUNCH(k_relu_bwd_join8, blocks_for((n + 7) / 8), THREADS, (bf16 *)da, acc_a, (bf16 *)db,
               acc_b, (const bf16 *)dout, (const bf16 *)out, n);
    else if (g_cuda.act16)
        LAUNCH(k_relu_bwd_join1<bf16>, blocks_for(n), THREADS, (bf16 *)da, acc_a, (bf16 *)db, acc_b,
               (const bf16 *)dout, (const bf16 *)out, n);
    else if (vec4_ok(p, 4))
        LAUNCH(k_relu_bwd_join, blocks_for((n + 3) / 4), THREADS, da, acc_a, db, acc_b, dout, out,
               n);
    else
        LAUNCH(k_relu_bwd_join1<float>, blocks_for(n), THREADS, da, acc_a, db, acc_b, dout, out, n);
}

/* out (n, O per `inner` run) = relu(out + b), in place; b NULL: relu alone. The sum is the
 * one rounding cuBLAS's beta = 1 makes when the bias was broadcast first. */
template <typename A>
__global__ void k_bias_relu1(A *out, const float *b, size_t n, int O, int inner)
{
    GRID_STRIDE(i, n)
    {
        const float o = act_ld(out[i]);
        const float v = b ? o + b[(i / (size_t)inner) % (size_t)O] : o;
        out[i] = act_st<A>(relu1(v));
    }
}

/* out = out + b[c] in place (storage A), b (O) per `inner` run: the bias of a convolution
 * written at beta = 0 (cuDNN's graph API), the same sum as a beta = 1 product onto a bias fill
 * (float addition commutes). */
template <typename A> __global__ void k_bias_add(A *out, const float *b, size_t n, int O, int inner)
{
    GRID_STRIDE(i, n) out[i] = act_st<A>(act_ld(out[i]) + b[(i / (size_t)inner) % (size_t)O]);
}

/* v + b[*c], then (*r, *c) moved on to the next element: place r in the run of `inner`
 * elements of feature c. */
__device__ __forceinline__ float add_bias_step(float v, const float *b, int *r, int *c, int O,
                                               int inner)
{
    v = v + b[*c];
    if (++*r == inner) {
        *r = 0;
        *c = *c + 1 == O ? 0 : *c + 1;
    }
    return v;
}

/* k_bias_relu1 on float4 vectors: one division per vector finds the first element's feature
 * c and its place r in the run; the other three step on from there. */
__global__ void k_bias_relu(float *out, const float *b, size_t n, int O, int inner)
{
    const size_t n4 = n / 4;
    GRID_STRIDE(i, n4)
    {
        float4 v = ((float4 *)out)[i];
        if (b) {
            const size_t q = 4 * i / (size_t)inner;
            int r = (int)(4 * i - q * (size_t)inner), c = (int)(q % (size_t)O);
            v.x = add_bias_step(v.x, b, &r, &c, O, inner);
            v.y = add_bias_step(v.y, b, &r, &c, O, inner);
            v.z = add_bias_step(v.z, b, &r, &c, O, inner);
            v.w = add_bias_step(v.w, b, &r, &c, O, inner);
        }
        v.x = relu1(v.x);
        v.y = relu1(v.y);
        v.z = relu1(v.z);
        v.w = relu1(v.w);
        ((float4 *)out)[i] = v;
    }
    GRID_STRIDE(t, n - 4 * n4)
    {
        const size_t i = 4 * n4 + t;
        const float v = b ? out[i] + b[(i / (size_t)inner) % (size_t)O] : out[i];
        out[i] = relu1(v);
    }
}

/* k_bias_relu1<bf16> on vectors of 8 (fill: k_fill_bias<bf16>, out = b broadcast, read not),
 * the feature of each element stepped on from the vector's first (chan_walk), then the tail. */
__global__ void k_bias8(bf16 *out, const float *b, size_t n, int O, int inner, int fill)
{
    const size_t n8 = n / 8;
    GRID_STRIDE(i, n8)
    {
        float v[8];
        if (!fill)
            act_ld8(v, out, i);
        chan_walk w = chan_at(8 * i, O, inner);
        for (int j = 0; j < 8; j++) {
            if (fill)
                v[j] = b[w.c];
            else
                v[j] = relu1(b ? v[j] + b[w.c] : v[j]);
            chan_next(&w, O, inner);
        }
        act_st8(out, i, v);
    }
    GRID_STRIDE(t, n - 8 * n8)
    {
        const size_t i = 8 * n8 + t;
        if (fill) {
            out[i] = act_st<bf16>(b[(i / (size_t)inner) % (size_t)O]);
        } else {
            const float o = act_ld(out[i]);
            const float v = b ? o + b[(i / (size_t)inner) % (size_t)O] : o;
            out[i] = act_st<bf16>(relu1(v));
        }
    }
}

template <typename A>
__global__ void k_dropout_graph(A *out, float *mask, const A *inp, size_t n, double p, float keep,
                                uint64_t salt, const graph_vals *sc)
{
    const uint64_t seed = sc->noise ^ salt;
    GRID_STRIDE(i, n)
    {
        const float m = ddp_uniform01(seed, i) >= p ? keep : 0.0f;
        mask[i] = m;
        out[i] = act_st<A>(act_ld(inp[i]) * m);
    }
}

/* dropout_fwd while a step is captured: the seed from the graph slot's step values. */
static void graph_dropout(float *out, float *mask, const float *inp, size_t n, double p, float keep,
                          uint64_t seed)
{
    const uint64_t salt = seed ^ g_cuda.graph.noise;
    const graph_vals *sc = g_cuda.graph.dev + g_cuda.graph.slot;
    const void *v[] = {out, mask, inp};
    if (g_cuda.act16 && vec4_ok(v, 3))
        LAUNCH(k_dropout_fwd8, blocks_for((n + 7) / 8), THREADS, (bf16 *)out, mask,
               (const bf16 *)inp, n, p, keep, salt, sc);
    else
        ACT_LAUNCH(k_dropout_graph, blocks_for(n), THREADS, (out, mask, inp, n, p, keep, salt, sc),
                   ((bf16 *)out, mask, (const bf16 *)inp, n, p, keep, salt, sc));
}

/* ---- dropout ----------------------------------------------------------------------------- */

static void cuda_dropout_fwd(float *out, float *mask, const float *inp, size_t n, float p,
                             uint64_t seed)
{
    if (!n)
        return;
    const float keep = p < 1 ? 1.0f / (1.0f - p) : 0.0f; /* as the CPU: in float */
    if (g_cuda.graph.capturing)
        return graph_dropout(out, mask, inp, n, (double)p, keep, seed);
    const void *v[] = {out, mask, inp};
    if (g_cuda.act16 && vec4_ok(v, 3)) {
        LAUNCH(k_dropout_fwd8, blocks_for((n + 7) / 8), THREADS, (bf16 *)out, mask,
               (const bf16 *)inp, n, (double)p, keep, seed, (const graph_vals *)NULL);
        return;
    }
    ACT_LAUNCH(k_dropout_fwd, blocks_for(n), THREADS, (out, mask, inp, n, (double)p, keep, seed),
               ((bf16 *)out, mask, (const bf16 *)inp, n, (double)p, keep, seed));
}

static void cuda_dropout_bwd(float *dinp, const float *dout, const float *mask, size_t n)
{
    if (!n)
        return;
    const void *v[] = {dinp, dout, mask};
    if (g_cuda.act16 && vec4_ok(v, 3)) {
        LAUNCH(k_mul8, blocks_for((n + 7) / 8), THREADS, (bf16 *)dinp, (const bf16 *)dout, mask, n);
        return;
    }
    ACT_LAUNCH(k_mul, blocks_for(n), THREADS, (dinp, dout, mask, n),
               ((bf16 *)dinp, (const bf16 *)dout, mask, n));
}

/* out (rows, O*inner) = b broadcast: every element of feature o = (idx / inner) % O gets b[o]
 * (linear and conv2d write their product onto it with beta = 1). */
void fill_bias(float *out, const float *b, size_t n, int O, int inner)
{
    const void *p[] = {out};
    if (g_cuda.act16 && vec4_ok(p, 1)) {
        LAUNCH(k_bias8, blocks_for((n + 7) / 8), THREADS, (bf16 *)out, b, n, O, inner, 1);
        return;
    }
    ACT_LAUNCH(k_fill_bias, blocks_for(n), THREADS, (out, b, n, O, inner),
               ((bf16 *)out, b, n, O, inner));
}

/* out = relu(out + b) in place, b (O) per `inner` run; b NULL: relu alone. The fused
 * epilogue of linear + relu and conv2d + relu. */
void bias_relu(float *out, const float *b, size_t n, int O, int inner)
{
    const void *p[] = {out};
    if (g_cuda.act16 && vec4_ok(p, 1))
        LAUNCH(k_bias8, blocks_for((n + 7) / 8), THREADS, (bf16 *)out, b, n, O, inner, 0);
    else if (g_cuda.act16)
        LAUNCH(k_bias_relu1<bf16>, blocks_for(n), THREADS, (bf16 *)out, b, n, O, inner);
    else if (vec4_ok(p, 1))
        LAUNCH(k_bias_relu, blocks_for((n + 3) / 4), THREADS, out, b, n, O, inner);
    else
        LAUNCH(k_bias_relu1<float>, blocks_for(n), THREADS, out, b, n, O, inner);
}

/* out = out + b in place, b (O) per `inner` run (activation storage in force). */
void bias_add(float *out, const float *b, size_t n, int O, int inner)
{
    ACT_LAUNCH(k_bias_add, blocks_for(n), THREADS, (out, b, n, O, inner),
               ((bf16 *)out, b, n, O, inner));
}

/* cuda.h's test entries of this part. */
extern "C" void ddp_cuda_test_fill_bias(float *out, const float *b, size_t n, int O, int inner)
{
    fill_bias(out, b, n, O, inner);
}

extern "C" void ddp_cuda_test_bias_relu(float *out, const float *b, size_t n, int O, int inner)
{
    bias_relu(out, b, n, O, inner);
}

/* The attributes of a kernel of this build: fails where the binary has no code for the GPU. */
cudaError_t kernel_attributes(cudaFuncAttributes *fa)
{
    return cudaFuncGetAttributes(fa, k_scale);
}

static void cuda_scale(float *x, size_t n, float a)
{
    if (!n)
        return;
    LAUNCH(k_scale, blocks_for(n), THREADS, x, n, a);
}

/* This part's entries of the ops table. */
void cuda_table_elementwise(struct ddp_backend *t)
{
    t->scale = cuda_scale;
    t->relu_fwd = cuda_relu_fwd;
    t->relu_bwd = cuda_relu_bwd;
    t->add_relu_fwd = cuda_add_relu_fwd;
    t->relu_bwd_join = cuda_relu_bwd_join;
    t->dropout_fwd = cuda_dropout_fwd;
    t->dropout_bwd = cuda_dropout_bwd;
}
