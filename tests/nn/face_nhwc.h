/*
 * face_nhwc.h - the CPU backend behind a channels-last face (backend.h set_layout), for the
 * model's tests: set_layout, layout, to_nhwc and to_nchw, and every spatial entry reading and
 * writing channels-last tensors once set_layout(DDP_LAYOUT_NHWC) ran, by transposing around
 * the CPU's own NCHW op (the same arithmetic, bit for bit). Every other entry is the CPU's.
 */
#ifndef DDP_TEST_FACE_NHWC_H
#define DDP_TEST_FACE_NHWC_H

#include "backend/backend.h"

/* The face's table (static; the same on every call). It starts in DDP_LAYOUT_NCHW. */
const struct ddp_backend *face_nhwc(void);
/* Set the face's layout, as set_layout does (one layout for every model built on it). */
void face_nhwc_layout(int layout);

#endif
