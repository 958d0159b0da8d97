/*
 * tbevents.h - TensorBoard event files, written from C: RUN_DIR/tb/events.out.tfevents.
 * <seconds>.<host>.<pid>, one file per start of a run (TensorBoard reads every file in the
 * directory, so a resumed run's curves continue).
 *
 * Format: TFRecord framing (uint64 length, masked CRC32C of the length, the bytes, masked
 * CRC32C of the bytes; little-endian) around tensorflow.Event protobufs: the first record
 * holds file_version "brain.Event:2", each scalar is an Event {wall_time, step,
 * summary {value {tag, simple_value}}}. Encoded by hand (report/pb.h); no TensorFlow.
 *
 * Only rank 0 writes. A failed write is fatal (ddp_die) with the path and the reason, as for
 * metrics.jsonl. This module does not decide which series exist: metrics.c does.
 */
#ifndef DDP_TBEVENTS_H
#define DDP_TBEVENTS_H

#include <stddef.h>
#include <stdint.h>

typedef struct ddp_tb ddp_tb;

/* Create run_dir/tb/ and a new events file in it. NULL with a one-line reason. */
ddp_tb *ddp_tb_open(const char *run_dir, char *err, size_t errlen);
/* One scalar at a global step; wall time is now. Non-finite values are written as they are
 * (TensorBoard shows NaN). */
void ddp_tb_scalar(ddp_tb *tb, const char *tag, int64_t step, double value);
/* Flush what was written (after each metrics line). */
void ddp_tb_flush(ddp_tb *tb);
void ddp_tb_close(ddp_tb *tb); /* accepts NULL */

/* CRC32C (Castagnoli) of n bytes, and TFRecord's mask of it; for tests. */
uint32_t ddp_crc32c(const void *p, size_t n);
uint32_t ddp_tb_masked_crc(const void *p, size_t n);

#endif
