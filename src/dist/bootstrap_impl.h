/*
 * bootstrap_impl.h - what bootstrap.c shares with its transports (rendezvous.c, pmi.c) and
 * with the unit tests; callers outside the launch module include bootstrap.h only.
 */
#ifndef DDP_LAUNCH_BOOTSTRAP_IMPL_H
#define DDP_LAUNCH_BOOTSTRAP_IMPL_H

#include <stddef.h>

#include "ddp_build.h"
#include "dist/bootstrap.h"

/* TCP rendezvous (rendezvous.c). token: the job token (NUL-terminated, at most
 * DDP_BOOTSTRAP_TOKEN_MAX bytes); seq: the number of this call in the process. */
int ddp_bootstrap_tcp(const struct ddp_world *w, const char *token, unsigned seq, void *blob,
                      size_t len, double timeout_s, char *err, size_t errlen);

#if HAVE_PMI2
/* PMI2 KVS (pmi.c). */
int ddp_bootstrap_pmi2(const struct ddp_world *w, unsigned seq, void *blob, size_t len,
                       double timeout_s, char *err, size_t errlen);
void ddp_bootstrap_pmi2_finalize(void);
#endif

/* The job token for w into tok (see bootstrap.h): DDP_BOOTSTRAP_TOKEN, Slurm ids, or the
 * world's size and master. */
void ddp_bootstrap_token(const struct ddp_world *w, char *tok, size_t toklen);

/* Lower-case hex of n bytes into out (2n + 1 bytes with the NUL). */
void ddp_bootstrap_hex_encode(const unsigned char *in, size_t n, char *out);
/* Exactly 2n hex digits (either case) into n bytes. Returns 0, or -1 on any other text. */
int ddp_bootstrap_hex_decode(const char *in, unsigned char *out, size_t n);

/* The ranks i in [0, n) with missing[i] != 0 as "3, 5-7, 9" into out, cut with ", ..." when
 * it does not fit. Returns how many are missing. */
int ddp_bootstrap_format_ranks(const unsigned char *missing, int n, char *out, size_t outlen);

#endif
