/*
 * suggest.h - "did you mean" for names a user typed (job-file sections and keys, --set,
 * layer names): the closest candidate by edit distance (Damerau: a swap of two neighbours
 * counts one), if it is close enough to be the likely intent.
 */
#ifndef DDP_SUGGEST_H
#define DDP_SUGGEST_H

#include <stddef.h>

/* Edit distance between a and b (case-insensitive), capped at 64 characters each. */
int ddp_edit_distance(const char *a, const char *b);
/* The candidate of cands[0..n) (NULL entries skipped) nearest to word, when its distance is at
 * most max(1, strlen(word) / 3) and word is not one of them; else NULL. Also a candidate that
 * word is a prefix of (3+ characters), e.g. "epoch" -> "epochs". */
const char *ddp_suggest(const char *word, const char *const *cands, int n);

#endif
