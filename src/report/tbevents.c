/* tbevents.c - TensorBoard event-file writer. See tbevents.h. */
#include "report/tbevents.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "job/config.h"
#include "report/pb.h"
#include "core/util.h"

struct ddp_tb {
    FILE *f;
    char path[DDP_PATH_MAX + 128];
};

uint32_t ddp_crc32c(const void *p, size_t n)
{
    static uint32_t table[256];
    static int ready;
    if (!ready) { /* reflected polynomial 0x1EDC6F41 */
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++)
                c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
            table[i] = c;
        }
        ready = 1;
    }
    const uint8_t *s = p;
    uint32_t crc = 0xffffffffu;
    for (size_t i = 0; i < n; i++)
        crc = table[(crc ^ s[i]) & 0xff] ^ (crc >> 8);
    return crc ^ 0xffffffffu;
}

uint32_t ddp_tb_masked_crc(const void *p, size_t n)
{
    uint32_t crc = ddp_crc32c(p, n);
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

static double wall_now(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + (double)tv.tv_usec * 1e-6;
}

static void le(uint8_t *out, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        out[i] = (uint8_t)(v >> (8 * i));
}

/* One TFRecord around an encoded Event; a failed write stops the run. */
static void write_record(ddp_tb *tb, const struct ddp_pb *ev)
{
    uint8_t head[12], tail[4];
    le(head, ev->len, 8);
    le(head + 8, ddp_tb_masked_crc(head, 8), 4);
    le(tail, ddp_tb_masked_crc(ev->data, ev->len), 4);
    if (fwrite(head, 1, sizeof head, tb->f) != sizeof head ||
        fwrite(ev->data, 1, ev->len, tb->f) != ev->len ||
        fwrite(tail, 1, sizeof tail, tb->f) != sizeof tail)
        ddp_die("%s: cannot write TensorBoard events: %s; free space there or set [job] "
                "tensorboard = false",
                tb->path, strerror(errno));
}

ddp_tb *ddp_tb_open(const char *run_dir, char *err, size_t errlen)
{
    char dir[DDP_PATH_MAX + 8], host[64] = "localhost";
    snprintf(dir, sizeof dir, "%s/tb", run_dir);
    if (ddp_mkdir_p(dir) != 0) {
        ddp_err(err, errlen, "%s: cannot create: %s", dir, strerror(errno));
        return NULL;
    }
    gethostname(host, sizeof host - 1);
    ddp_tb *tb = ddp_calloc(1, sizeof *tb);
    snprintf(tb->path, sizeof tb->path, "%s/events.out.tfevents.%lld.%s.%d", dir,
             (long long)wall_now(), host, (int)getpid());
    tb->f = fopen(tb->path, "wb");
    if (!tb->f) {
        ddp_err(err, errlen, "%s: cannot write TensorBoard events: %s", tb->path, strerror(errno));
        free(tb);
        return NULL;
    }
    struct ddp_pb ev = {0};
    ddp_pb_double(&ev, 1, wall_now());      /* Event.wall_time */
    ddp_pb_string(&ev, 3, "brain.Event:2"); /* Event.file_version */
    write_record(tb, &ev);
    ddp_pb_free(&ev);
    ddp_tb_flush(tb);
    return tb;
}

void ddp_tb_scalar(ddp_tb *tb, const char *tag, int64_t step, double value)
{
    if (!tb)
        return;
    struct ddp_pb val = {0}, sum = {0}, ev = {0};
    ddp_pb_string(&val, 1, tag);           /* Summary.Value.tag */
    ddp_pb_float(&val, 2, (float)value);   /* Summary.Value.simple_value */
    ddp_pb_message(&sum, 1, &val);         /* Summary.value */
    ddp_pb_double(&ev, 1, wall_now());     /* Event.wall_time */
    ddp_pb_varint(&ev, 2, (uint64_t)step); /* Event.step */
    ddp_pb_message(&ev, 5, &sum);          /* Event.summary */
    write_record(tb, &ev);
    ddp_pb_free(&ev);
}

void ddp_tb_flush(ddp_tb *tb)
{
    if (tb && (fflush(tb->f) != 0 || ferror(tb->f)))
        ddp_die("%s: cannot write TensorBoard events: %s; free space there or set [job] "
                "tensorboard = false",
                tb->path, strerror(errno));
}

void ddp_tb_close(ddp_tb *tb)
{
    if (!tb)
        return;
    ddp_tb_flush(tb);
    fclose(tb->f);
    free(tb);
}
