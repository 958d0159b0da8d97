/*
 * model_impl.h - what the model's three files (model_parse.c, model.c, model_run.c) share and
 * nothing else includes: names of layer kinds, shapes and layers for messages, and a conv
 * layer's geometry for the backend table.
 */
#ifndef DDP_MODEL_IMPL_H
#define DDP_MODEL_IMPL_H

#include <stddef.h>

#include "backend/backend.h"
#include "nn/model.h"

#define POS_MAX 32 /* "3.2.1.4.1": a layer's position, for messages */

/* The grammar's name of a layer kind ("conv2d"). */
const char *model_kind_name(enum ddp_layer_kind k);
/* "(d0, d1, d2)" of a shape of ndim dimensions into buf. */
void model_shape_str(int ndim, const int *d, char *buf, size_t len);
/* A layer spec in the grammar's syntax ("conv2d(16, 3, pad=1)") into buf. */
void model_layer_str(const struct ddp_layer_spec *s, char *buf, size_t len);
/* The backend's convolution geometry of conv layer l. */
struct ddp_conv_geom model_conv_geom(const struct ddp_layer *l);

/* The first layer with parameters (nlayers: none): backward stops there. */
int model_first_param(const struct ddp_model *m);
/* 1 when the model's input needs a channels-last copy (struct ddp_model xin): the model is
 * channels-last, its input (C,H,W) has C > 1 and H*W > 1, and a layer other than flatten
 * reads it. */
int model_input_relayout(const struct ddp_model *m);
/* 1 when the model keeps a converted copy of its input in xin: channels-last
 * (model_input_relayout) or bf16 storage (act16). */
int model_input_copy(const struct ddp_model *m);
/* Point the layers' batch-sized buffers into arena by plan p (model_plan.c). */
void model_plan_assign(struct ddp_model *m, const struct ddp_mem_plan *p, char *arena);

#endif
