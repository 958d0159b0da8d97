/* pb.c - protocol-buffer encoder. See pb.h. */
#include "report/pb.h"

#include <stdlib.h>
#include <string.h>

#include "core/util.h"

void ddp_pb_free(struct ddp_pb *b)
{
    free(b->data);
    memset(b, 0, sizeof *b);
}

void ddp_pb_raw(struct ddp_pb *b, const void *p, size_t n)
{
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n)
            cap *= 2;
        b->data = ddp_realloc(b->data, cap);
        b->cap = cap;
    }
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
}

/* A bare varint (no tag). */
static void put_varint(struct ddp_pb *b, uint64_t v)
{
    uint8_t tmp[10];
    int n = 0;
    do {
        tmp[n] = (uint8_t)(v & 0x7f);
        v >>= 7;
        if (v)
            tmp[n] |= 0x80;
        n++;
    } while (v);
    ddp_pb_raw(b, tmp, (size_t)n);
}

static void put_tag(struct ddp_pb *b, int field, int wire)
{
    put_varint(b, ((uint64_t)field << 3) | (uint64_t)wire);
}

void ddp_pb_varint(struct ddp_pb *b, int field, uint64_t v)
{
    put_tag(b, field, 0);
    put_varint(b, v);
}

/* Little-endian bytes of an n-byte value, whatever the host's order. */
static void put_le(struct ddp_pb *b, uint64_t v, int n)
{
    uint8_t tmp[8];
    for (int i = 0; i < n; i++)
        tmp[i] = (uint8_t)(v >> (8 * i));
    ddp_pb_raw(b, tmp, (size_t)n);
}

void ddp_pb_double(struct ddp_pb *b, int field, double v)
{
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    put_tag(b, field, 1);
    put_le(b, u, 8);
}

void ddp_pb_float(struct ddp_pb *b, int field, float v)
{
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    put_tag(b, field, 5);
    put_le(b, u, 4);
}

void ddp_pb_bytes(struct ddp_pb *b, int field, const void *p, size_t n)
{
    put_tag(b, field, 2);
    put_varint(b, n);
    ddp_pb_raw(b, p, n);
}

void ddp_pb_string(struct ddp_pb *b, int field, const char *s)
{
    ddp_pb_bytes(b, field, s, strlen(s));
}

void ddp_pb_message(struct ddp_pb *b, int field, struct ddp_pb *sub)
{
    ddp_pb_bytes(b, field, sub->data, sub->len);
    ddp_pb_free(sub);
}

void ddp_pb_packed_i64(struct ddp_pb *b, int field, const int64_t *v, int n)
{
    struct ddp_pb tmp = {0};
    for (int i = 0; i < n; i++)
        put_varint(&tmp, (uint64_t)v[i]);
    ddp_pb_message(b, field, &tmp);
}
