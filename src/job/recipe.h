/*
 * recipe.h - the job's cross-key checks, run once the file and every --set are in
 * (ddp_job_validate), and the training-recipe keys whose values are small lists: [data]
 * augment, [data] normalize, [optim] milestones, parsed into struct ddp_job (docs/training.md,
 * Recipes). It reads the schema (config.h: ddp_job_where); the schema does not call it.
 *
 * Grammar (blanks around items are ignored):
 *   augment    = item {"," item};  item = "random_crop(pad=" P ")" | "random_crop(" P ")"
 *                | "hflip"                                   P in 1..DDP_CROP_PAD_MAX
 *   normalize  = number {"," number}: C means then C standard deviations (> 0), C <= 16
 *   milestones = epoch {"," epoch}: strictly increasing integers >= 1, at most 32
 *
 * Errors: -1 with ONE line naming the key as ddp_job_where does, what was wrong and the fix.
 * It does not know the dataset: whether normalize has one pair per channel is checked when the
 * data are open (ddp_recipe_check_data).
 */
#ifndef DDP_RECIPE_H
#define DDP_RECIPE_H

#include <stddef.h>

#include "job/config.h"

#define DDP_CROP_PAD_MAX 1024 /* pixels of zero padding; far beyond any real recipe */

/* Cross-key checks after all overrides (e.g. nesterov needs momentum); parses augment,
 * normalize and milestones into job and checks the recipe keys together. */
int ddp_job_validate(struct ddp_job *job, char *err, size_t errlen);

/* [data] normalize against samples of `channels` channels (1 for flat samples) and
 * [data] augment against samples of rank nd (random_crop and hflip need (C, H, W)). */
int ddp_recipe_check_data(const struct ddp_job *job, int nd, int channels, char *err,
                          size_t errlen);

#endif
