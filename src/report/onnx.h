/*
 * onnx.h - the model as an ONNX file (opset 17, IR version 8), encoded by hand (report/pb.h):
 * one graph "input" (N, C, H, W) or (N, D) float -> "logits" (N, K), the weights as float
 * initializers named as in checkpoints ("1.weight"), the layers in inference form (batchnorm
 * with its running statistics, dropout as Identity).
 *
 * One table row per layer kind maps it to an ONNX operator, its attributes and the tensors it
 * takes; a new layer kind is one row (and a build-time check fails until it has one).
 * Written to OUT.tmp, fsynced, renamed. It does not run the model nor check it: tests run
 * onnx.checker and onnxruntime.
 */
#ifndef DDP_ONNX_H
#define DDP_ONNX_H

#include <stddef.h>

#include "nn/model.h"

#define DDP_ONNX_OPSET 17

/* Write m (weights downloaded from its backend) to path. 0, or -1 with one line in err. */
int ddp_onnx_write(const struct ddp_model *m, const char *path, const char *graph_name, char *err,
                   size_t errlen);

#endif
