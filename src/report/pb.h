/*
 * pb.h - a minimal protocol-buffer encoder, enough for TensorBoard's Event records
 * (tbevents.c) and ONNX models (onnx.c). Messages are built bottom-up: encode a sub-message
 * into its own buffer, then append it to its parent as a length-delimited field.
 *
 * It encodes only; it never decodes, and it knows no schema: callers give field numbers.
 * Wire types: 0 varint (int32/int64/enum/bool), 1 fixed64 (double), 2 length-delimited
 * (string, bytes, sub-message, packed repeated), 5 fixed32 (float).
 *
 * Buffers grow with ddp_realloc (which never returns NULL); ddp_pb_free releases one.
 */
#ifndef DDP_PB_H
#define DDP_PB_H

#include <stddef.h>
#include <stdint.h>

struct ddp_pb {
    uint8_t *data; /* (len) bytes, owned */
    size_t len, cap;
};

void ddp_pb_free(struct ddp_pb *b); /* accepts a zeroed buffer; leaves it zeroed */
void ddp_pb_raw(struct ddp_pb *b, const void *p, size_t n);
void ddp_pb_varint(struct ddp_pb *b, int field, uint64_t v); /* negative int64: cast, 10 bytes */
void ddp_pb_double(struct ddp_pb *b, int field, double v);
void ddp_pb_float(struct ddp_pb *b, int field, float v);
void ddp_pb_bytes(struct ddp_pb *b, int field, const void *p, size_t n);
void ddp_pb_string(struct ddp_pb *b, int field, const char *s);
/* A sub-message: appends sub's bytes as field, then frees sub. */
void ddp_pb_message(struct ddp_pb *b, int field, struct ddp_pb *sub);
/* Packed repeated int64 (varints) and float (fixed32). */
void ddp_pb_packed_i64(struct ddp_pb *b, int field, const int64_t *v, int n);

#endif
