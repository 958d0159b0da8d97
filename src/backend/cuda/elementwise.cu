/*
 * elementwise.cu - the CUDA backend's elementwise ops (see internal.cuh for the parts): relu,
 * dropout (also as captured in a CUDA graph), scale, and for linear and conv2d the bias
 * broadcast and the fused bias + relu epilogue. One thread per element, grid-stride loops.
 * It leaves the GEMMs and convolutions to blas.cu and conv.cu, the graphs' values to graph.cu.
 */
#include "backend/cuda/internal.cuh"

/* ---- kernels ------------------------------------------------------------------------------ */

__global__ void k_scale(float *x, size_t n, float a)
{
    GRID_STRIDE(i, n) x[i] *= a;
}

/* out (rows, O*inner): every element of feature o = (idx / inner) % O gets b[o]. */
__global__ void k_fill_bias(float *out, const float *b, size_t n, int O, int inner)
{
    GRID_STRIDE(i, n) out[i] = b[(i / (size_t)inner) % (size_t)O];
}

__global__ void k_relu_fwd(float *out, const float *inp, size_t n)
{
    GRID_STRIDE(i, n) out[i] = inp[i] > 0 ? inp[i] : 0;
}

__global__ void k_relu_bwd(float *dinp, const float *dout, const float *out, size_t n)
{
    GRID_STRIDE(i, n) dinp[i] = out[i] > 0 ? dout[i] : 0;
}

__global__ void k_dropout_fwd(float *out, float *mask, const float *inp, size_t n, double p,
                              float keep, uint64_t seed)
{
    GRID_STRIDE(i, n)
    {
        const float m = ddp_uniform01(seed, i) >= p ? keep : 0.0f;
        mask[i] = m;
        out[i] = inp[i] * m;
    }
}

__global__ void k_mul(float *dinp, const float *dout, const float *mask, size_t n)
{
    GRID_STRIDE(i, n) dinp[i] = dout[i] * mask[i];
}

static void cuda_relu_fwd(float *out, const float *inp, size_t n)
{
    if (!n)
        return;
    LAUNCH(k_relu_fwd, blocks_for(n), THREADS, out, inp, n);
}

static void cuda_relu_bwd(float *dinp, const float *dout, const float *out, size_t n)
{
    if (!n)
        return;
    LAUNCH(k_relu_bwd, blocks_for(n), THREADS, dinp, dout, out, n);
}

/* out (n, O per `inner` run) = relu(out + b), in place; b NULL: relu alone. The sum is the
 * one rounding cuBLAS's beta = 1 makes when the bias was broadcast first. */
__global__ void k_bias_relu(float *out, const float *b, size_t n, int O, int inner)
{
    GRID_STRIDE(i, n)
    {
        const float v = b ? out[i] + b[(i / (size_t)inner) % (size_t)O] : out[i];
        out[i] = v > 0 ? v : 0;
    }
}

__global__ void k_dropout_graph(float *out, float *mask, const float *inp, size_t n, double p,
                                float keep, uint64_t salt, const graph_vals *sc)
{
    const uint64_t seed = sc->noise ^ salt;
    GRID_STRIDE(i, n)
    {
        const float m = ddp_uniform01(seed, i) >= p ? keep : 0.0f;
        mask[i] = m;
        out[i] = inp[i] * m;
    }
}

/* dropout_fwd while a step is captured: the seed from the graph slot's step values. */
static void graph_dropout(float *out, float *mask, const float *inp, size_t n, double p, float keep,
                          uint64_t seed)
{
    LAUNCH(k_dropout_graph, blocks_for(n), THREADS, out, mask, inp, n, p, keep,
           seed ^ g_cuda.graph.noise, g_cuda.graph.dev + g_cuda.graph.slot);
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
    LAUNCH(k_dropout_fwd, blocks_for(n), THREADS, out, mask, inp, n, (double)p, keep, seed);
}

static void cuda_dropout_bwd(float *dinp, const float *dout, const float *mask, size_t n)
{
    if (!n)
        return;
    LAUNCH(k_mul, blocks_for(n), THREADS, dinp, dout, mask, n);
}

/* out (rows, O*inner) = b broadcast: every element of feature o = (idx / inner) % O gets b[o]
 * (linear and conv2d write their product onto it with beta = 1). */
void fill_bias(float *out, const float *b, size_t n, int O, int inner)
{
    LAUNCH(k_fill_bias, blocks_for(n), THREADS, out, b, n, O, inner);
}

/* out = relu(out + b) in place, b (O) per `inner` run; b NULL: relu alone. The fused
 * epilogue of linear + relu and conv2d + relu. */
void bias_relu(float *out, const float *b, size_t n, int O, int inner)
{
    LAUNCH(k_bias_relu, blocks_for(n), THREADS, out, b, n, O, inner);
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
    t->dropout_fwd = cuda_dropout_fwd;
    t->dropout_bwd = cuda_dropout_bwd;
}
