/*
 * test_model_layout.c - the model on channels-last activations (model.h nhwc, backend.h
 * set_layout): its input copy, the flatten that turns a channels-last tensor back into
 * PyTorch's order, and the memory plan's lifetimes for both. The backend here is the CPU
 * backend behind a channels-last face (face_nhwc.h): every spatial entry takes its (B,H,W,C) arguments,
 * transposes them to NCHW, runs the CPU's own op and transposes the results back, so the
 * arithmetic is the CPU's, bit for bit. A model built on it must then give the logits and the
 * parameter gradients of the same model built on the plain CPU backend bit for bit; a wrong
 * order anywhere in the model (an input read before its copy, a flatten left channels-last, a
 * buffer reused while live) changes them. The CUDA backend's own channels-last kernels are
 * tested against its NCHW ones in tests/gpu.
 *
 * Dimension letters: B batch, C channels, S positions per channel.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "check.h"
#include "face_nhwc.h"
#include "core/util.h"
#include "nn/model.h"

static const struct ddp_backend *g_cpu, *g_face; /* the CPU backend; channels-last */

/* Two training steps of layers on a batch of B samples (c,h,w), on the CPU and on its
 * channels-last face: the logits and parameter gradients of each step bit for bit equal.
 * want_xin, want_relayout: whether the channels-last model keeps an input copy and how many
 * flattens turn back. */
static void same(const char *layers, int64_t c, int64_t h, int64_t w, int want_xin,
                 int want_relayout)
{
    enum { B = 5 };
    const int64_t dims[3] = {c, h, w};
    struct ddp_model m[2];
    char err[512] = "";
    const size_t in = (size_t)(c * h * w);
    float *x = ddp_malloc(sizeof(float) * B * in);
    for (size_t i = 0; i < B * in; i++)
        x[i] = (float)((i * 7919 + 13) % 101) / 50.0f - 1.0f;
    for (int k = 0; k < 2; k++) {
        const struct ddp_backend *be = k ? g_face : g_cpu;
        face_nhwc_layout(k ? DDP_LAYOUT_NHWC : DDP_LAYOUT_NCHW);
        int rc = ddp_model_create(&m[k], be, layers, 3, dims, B, err, sizeof err);
        CHECK(rc == 0, "%s: %s", layers, err);
        if (rc)
            return;
        ddp_model_init(&m[k], 7);
    }
    int relayouts = 0;
    for (int i = 0; i < m[1].nlayers; i++)
        relayouts += m[1].layers[i].relayout;
    CHECK(m[1].nhwc && !m[0].nhwc && !m[0].xin, "%s: nhwc flags", layers);
    CHECK(!!m[1].xin == want_xin, "%s: input copy %d, want %d", layers, !!m[1].xin, want_xin);
    CHECK(relayouts == want_relayout, "%s: %d relayout flattens, want %d", layers, relayouts,
          want_relayout);
    for (int step = 0; step < 2; step++) {
        const float *logits[2];
        for (int k = 0; k < 2; k++) {
            face_nhwc_layout(k ? DDP_LAYOUT_NHWC : DDP_LAYOUT_NCHW);
            memset(m[k].grads, 0, sizeof(float) * m[k].nparams);
            logits[k] = ddp_model_forward(&m[k], x, B, 1, 99);
            float *d = ddp_model_dlogits(&m[k]);
            for (int i = 0; i < B * m[k].classes; i++)
                d[i] = logits[k][i] * 0.25f - (float)(i % 3) * 0.1f;
            ddp_model_backward(&m[k], x, B, NULL, NULL);
        }
        CHECK(memcmp(logits[0], logits[1], sizeof(float) * B * m[0].classes) == 0,
              "%s: step %d logits differ", layers, step);
        CHECK(memcmp(m[0].grads, m[1].grads, sizeof(float) * m[0].nparams) == 0,
              "%s: step %d gradients differ", layers, step);
        for (size_t i = 0; i < m[0].nparams; i++) /* a step of plain SGD for the next */
            m[0].params[i] = m[1].params[i] = m[0].params[i] - 0.1f * m[0].grads[i];
    }
    for (int k = 0; k < 2; k++)
        ddp_model_free(&m[k]);
    free(x);
}

int main(void)
{
    g_cpu = ddp_backend_cpu();
    g_face = face_nhwc();
    /* a CNN: three input channels read by a conv2d (the input copy), a flatten of 8x3x3 */
    same("conv2d(8, 3, pad=1), relu, maxpool(2), conv2d(8, 3, stride=2), batchnorm, relu,"
         " flatten, linear(16), relu, linear(10)",
         3, 12, 12, 1, 1);
    /* one input channel: the two orders are the same bytes, no copy */
    same("conv2d(4, 3, pad=1), relu, avgpool(2), flatten, linear(10)", 1, 8, 8, 0, 1);
    /* a residual block at the input: its shortcut and body both read the copy */
    same("residual(conv2d(8, 3, pad=1, bias=false), batchnorm, relu, conv2d(8, 3, pad=1)), relu,"
         " globalavgpool, flatten, linear(10)",
         3, 8, 8, 1, 0);
    /* an identity block at the input: the join adds the copy itself */
    same("residual(conv2d(3, 3, pad=1), relu), maxpool(2), flatten, dropout(0.5), linear(10)", 3, 6,
         6, 1, 1);
    /* a flatten first: it reads the trainer's input, in PyTorch's order; a 1x1 image */
    same("flatten, linear(12), relu, linear(10)", 3, 4, 4, 0, 0);
    same("conv2d(6, 1), batchnorm, relu, flatten, linear(10)", 4, 1, 1, 0, 0);
    return check_report("test_model_layout");
}
