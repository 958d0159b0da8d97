/*
 * onnx.h - the model as an ONNX file (opset 17, IR version 8), encoded by hand (report/pb.h):
 * one graph "input" (N, C, H, W) or (N, D) -> "logits" (N, K), the weights as float
 * initializers named as in checkpoints ("1.weight"), the layers in inference form (batchnorm
 * with its running statistics, dropout as Identity).
 *
 * The input is either float32 samples already scaled and normalised as the model saw them, or
 * uint8 pixels as a dataset stores them: then the graph starts as the trainer's reader does,
 * Cast to float, Div by 255 ("pixel_scale") and, with [data] normalize, Sub "norm_mean" and
 * Div "norm_std" per channel (initializers of shape (C, 1, 1), or (1) for flat samples), the
 * same float operations in the same order, so raw pixels give ddptrain's logits.
 *
 * One table row per layer kind maps it to an ONNX operator, its attributes and the tensors it
 * takes; a new layer kind is one row (and a build-time check fails until it has one).
 * Written to OUT.tmp, fsynced, renamed. It does not run the model nor check it: tests run
 * onnx.checker and onnxruntime.
 */
#ifndef DDP_ONNX_H
#define DDP_ONNX_H

#include <stddef.h>

#include "job/config.h" /* DDP_NORM_CHANNELS_MAX */
#include "nn/model.h"

#define DDP_ONNX_OPSET 17

/* What the graph's input is. */
struct ddp_onnx_input {
    int uint8; /* 1: uint8 pixels, scaled and normalised in the graph; 0: float as the model
                  takes it */
    int nchan; /* uint8: channels normalised (0: none, else the sample's C) */
    float mean[DDP_NORM_CHANNELS_MAX], std[DDP_NORM_CHANNELS_MAX];
};

/* Write m (weights downloaded from its backend) to path; in NULL is a float input. 0, or -1
 * with one line in err. */
int ddp_onnx_write(const struct ddp_model *m, const char *path, const char *graph_name,
                   const struct ddp_onnx_input *in, char *err, size_t errlen);

#endif
