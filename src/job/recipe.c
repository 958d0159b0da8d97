/*
 * recipe.c - the job's cross-key checks (ddp_job_validate), parsing of [data] augment,
 * [data] normalize, [optim] milestones and the recipe keys' cross checks. See recipe.h.
 */
#include "job/recipe.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/suggest.h"
#include "core/util.h"

#define ITEMS_MAX 64 /* list items in one value; more is an error */
#define ITEM_LEN 128

/* Split s at top-level commas into items (trimmed); -1 if there are too many or one is too
 * long or empty. */
static int split_items(const char *s, char items[][ITEM_LEN], int max)
{
    int n = 0, depth = 0;
    size_t len = 0;
    char cur[ITEM_LEN];
    for (const char *p = s;; p++) {
        if (*p == '(')
            depth++;
        if (*p == ')')
            depth--;
        if (*p == '\0' || (*p == ',' && depth == 0)) {
            size_t a = 0, b = len;
            while (a < b && (cur[a] == ' ' || cur[a] == '\t'))
                a++;
            while (b > a && (cur[b - 1] == ' ' || cur[b - 1] == '\t'))
                b--;
            if (b == a || n == max)
                return -1;
            snprintf(items[n++], ITEM_LEN, "%.*s", (int)(b - a), cur + a);
            len = 0;
            if (*p == '\0')
                return n;
            continue;
        }
        if (len + 1 >= ITEM_LEN)
            return -1;
        cur[len++] = *p;
    }
}

static int only_blanks(const char *s)
{
    return s[strspn(s, " \t")] == '\0';
}

/* One augment item into job; -1 with why. */
static int augment_item(struct ddp_job *job, const char *it, char *why, size_t whylen)
{
    static const char *const known[] = {"random_crop", "hflip"};
    char name[ITEM_LEN];
    size_t nl = strcspn(it, "( \t");
    snprintf(name, sizeof name, "%.*s", (int)nl, it);
    if (strcmp(name, "hflip") == 0 && it[nl] == '\0') {
        if (job->hflip)
            return ddp_err(why, whylen, "hflip given twice; keep one");
        job->hflip = 1;
        return 0;
    }
    if (strcmp(name, "hflip") == 0)
        return ddp_err(why, whylen, "'%s': hflip takes no arguments; write hflip", it);
    if (strcmp(name, "random_crop") == 0) {
        const char *a = strchr(it, '('), *z = strrchr(it, ')');
        char arg[ITEM_LEN];
        int64_t pad;
        if (!a || !z || z < a || z[1] != '\0')
            return ddp_err(why, whylen, "'%s': expected random_crop(pad=P)", it);
        snprintf(arg, sizeof arg, "%.*s", (int)(z - a - 1), a + 1);
        char *v = arg + strspn(arg, " \t"), *eq = strchr(v, '=');
        const size_t kl = strcspn(v, "= \t");
        if (eq && (kl != 3 || strncmp(v, "pad", 3) != 0))
            return ddp_err(why, whylen,
                           "'%s': unknown argument '%.*s'; did you mean "
                           "random_crop(pad=%s)?",
                           it, (int)kl, v, eq + 1 + strspn(eq + 1, " \t"));
        v = eq ? eq + 1 : v;
        if (ddp_parse_i64(v, &pad) != 0 || pad < 1 || pad > DDP_CROP_PAD_MAX)
            return ddp_err(why, whylen, "'%s': pad must be a whole number from 1 to %d", it,
                           DDP_CROP_PAD_MAX);
        if (job->crop_pad)
            return ddp_err(why, whylen, "random_crop given twice; keep one");
        job->crop_pad = (int)pad;
        return 0;
    }
    const char *near = ddp_suggest(name, known, 2);
    char hint[64] = "";
    if (near)
        snprintf(hint, sizeof hint, " did you mean '%s'?", near);
    return ddp_err(why, whylen,
                   "'%s': unknown augmentation;%s expected random_crop(pad=P) or hflip", it, hint);
}

static int parse_augment(struct ddp_job *job, char *err, size_t errlen)
{
    char items[ITEMS_MAX][ITEM_LEN], why[DDP_ERR_LEN], where[DDP_PATH_MAX + 64];
    job->crop_pad = 0;
    job->hflip = 0;
    if (only_blanks(job->augment))
        return 0;
    int n = split_items(job->augment, items, ITEMS_MAX);
    if (n < 0)
        return ddp_err(err, errlen,
                       "%s: an empty or overlong item; expected e.g. "
                       "random_crop(pad=4), hflip",
                       ddp_job_where(job, "data", "augment", where, sizeof where));
    for (int i = 0; i < n; i++)
        if (augment_item(job, items[i], why, sizeof why) != 0)
            return ddp_err(err, errlen, "%s: %s",
                           ddp_job_where(job, "data", "augment", where, sizeof where), why);
    return 0;
}

static int parse_normalize(struct ddp_job *job, char *err, size_t errlen)
{
    char items[ITEMS_MAX][ITEM_LEN], where[DDP_PATH_MAX + 64];
    double v[ITEMS_MAX];
    job->norm_channels = 0;
    if (only_blanks(job->normalize))
        return 0;
    ddp_job_where(job, "data", "normalize", where, sizeof where);
    int n = split_items(job->normalize, items, ITEMS_MAX);
    if (n < 0 || n > 2 * DDP_NORM_CHANNELS_MAX)
        return ddp_err(err, errlen,
                       "%s: expected C means then C standard deviations (C at most %d), "
                       "e.g. 0.286, 0.353",
                       where, DDP_NORM_CHANNELS_MAX);
    for (int i = 0; i < n; i++)
        if (ddp_parse_f64(items[i], &v[i]) != 0 || !isfinite(v[i]))
            return ddp_err(err, errlen,
                           "%s: '%s' is not a number; expected C means then C "
                           "standard deviations, e.g. 0.286, 0.353",
                           where, items[i]);
    if (n % 2)
        return ddp_err(err, errlen,
                       "%s: %d numbers; expected as many means as standard "
                       "deviations (one pair per channel)",
                       where, n);
    /* the batch is normalised in float32 as (x - mean) / std: a std that float32 makes 0 or
     * subnormal, or a mean beyond its range, turns every input into inf or NaN */
    for (int c = 0; c < n / 2; c++) {
        double sd = v[n / 2 + c];
        if (!(sd >= FLT_MIN && sd <= FLT_MAX))
            return ddp_err(err, errlen,
                           "%s: standard deviation %g of channel %d; expected a normal float32, "
                           "%g (FLT_MIN) to %g",
                           where, sd, c, (double)FLT_MIN, (double)FLT_MAX);
        if (!(fabs(v[c]) <= FLT_MAX))
            return ddp_err(err, errlen,
                           "%s: mean %g of channel %d; expected a finite float32, -%g to %g", where,
                           v[c], c, (double)FLT_MAX, (double)FLT_MAX);
        job->norm_mean[c] = (float)v[c];
        job->norm_std[c] = (float)v[n / 2 + c];
    }
    job->norm_channels = n / 2;
    return 0;
}

static int parse_milestones(struct ddp_job *job, char *err, size_t errlen)
{
    char items[ITEMS_MAX][ITEM_LEN], where[DDP_PATH_MAX + 64];
    job->nmilestones = 0;
    ddp_job_where(job, "optim", "milestones", where, sizeof where);
    if (only_blanks(job->milestones_text)) {
        if (job->schedule == DDP_SCHEDULE_MULTISTEP)
            return ddp_err(err, errlen,
                           "%s: empty; schedule = multistep needs the epochs at "
                           "which lr drops, e.g. milestones = 30, 60",
                           where);
        return 0;
    }
    if (job->schedule != DDP_SCHEDULE_MULTISTEP)
        return ddp_err(err, errlen,
                       "%s: applies to schedule = multistep only; set [optim] "
                       "schedule = multistep or remove milestones",
                       where);
    int n = split_items(job->milestones_text, items, ITEMS_MAX);
    if (n < 0 || n > DDP_MILESTONES_MAX)
        return ddp_err(err, errlen, "%s: expected 1 to %d epochs separated by commas", where,
                       DDP_MILESTONES_MAX);
    for (int i = 0; i < n; i++) {
        int64_t e;
        if (ddp_parse_i64(items[i], &e) != 0 || e < 1 || e > 1000000000)
            return ddp_err(err, errlen, "%s: '%s' is not an epoch; expected whole numbers >= 1",
                           where, items[i]);
        if (i > 0 && e <= job->milestones[i - 1])
            return ddp_err(err, errlen, "%s: %lld after %lld; expected increasing epochs", where,
                           (long long)e, (long long)job->milestones[i - 1]);
        job->milestones[i] = e;
    }
    job->nmilestones = n;
    return 0;
}

/* Cross-key checks of the recipe keys. */
static int check_combinations(const struct ddp_job *job, char *err, size_t errlen)
{
    char where[DDP_PATH_MAX + 64];
    int has_val = job->data_val[0] != '\0' || job->val_fraction > 0;
    if (job->data_val[0] && job->val_fraction > 0)
        return ddp_err(err, errlen, "%s: set together with [data] val; use one of them",
                       ddp_job_where(job, "data", "val_fraction", where, sizeof where));
    if (job->keep_best != DDP_KEEP_BEST_NONE && !has_val)
        return ddp_err(err, errlen,
                       "%s: needs a validation split; set [data] val or "
                       "val_fraction",
                       ddp_job_where(job, "checkpoint", "keep_best", where, sizeof where));
    if (job->early_stop > 0 && !has_val)
        return ddp_err(err, errlen,
                       "%s: needs a validation split; set [data] val or "
                       "val_fraction",
                       ddp_job_where(job, "train", "early_stop", where, sizeof where));
    if (job->schedule == DDP_SCHEDULE_ONECYCLE && job->warmup_epochs > 0)
        return ddp_err(err, errlen,
                       "%s: onecycle has its own warmup (pct_start); set "
                       "warmup_epochs = 0",
                       ddp_job_where(job, "optim", "warmup_epochs", where, sizeof where));
    return 0;
}

/* Parse augment, normalize and milestones into job; check the recipe keys together. */
static int recipe_parse(struct ddp_job *job, char *err, size_t errlen)
{
    if (parse_augment(job, err, errlen) != 0 || parse_normalize(job, err, errlen) != 0 ||
        parse_milestones(job, err, errlen) != 0)
        return -1;
    return check_combinations(job, err, errlen);
}

int ddp_job_validate(struct ddp_job *job, char *err, size_t errlen)
{
    char where[DDP_PATH_MAX + 64];
    if (job->nesterov && job->momentum <= 0)
        return ddp_err(err, errlen,
                       "%s: Nesterov momentum needs momentum > 0; set [optim] "
                       "momentum or nesterov = false",
                       ddp_job_where(job, "optim", "nesterov", where, sizeof where));
    if (job->optim != DDP_OPTIM_SGD && job->momentum != 0)
        return ddp_err(err, errlen,
                       "%s: momentum applies to sgd only; for adam/adamw use "
                       "beta1",
                       ddp_job_where(job, "optim", "momentum", where, sizeof where));
    if (job->output[0] == '\0')
        return ddp_err(err, errlen, "%s: empty; expected a directory for the run's files",
                       ddp_job_where(job, "job", "output", where, sizeof where));
    if (job->data_file[0] == '\0')
        return ddp_err(err, errlen, "%s: empty; expected an HDF5 dataset path",
                       ddp_job_where(job, "data", "file", where, sizeof where));
    if (job->data_train[0] == '\0')
        return ddp_err(err, errlen, "%s: empty; expected a group such as /train",
                       ddp_job_where(job, "data", "train", where, sizeof where));
    if (job->init[0] == '\0')
        return ddp_err(err, errlen,
                       "%s: empty; expected pytorch (the default) or the path of a weights file",
                       ddp_job_where(job, "model", "init", where, sizeof where));
    if (job->resume[0] == '\0')
        return ddp_err(err, errlen,
                       "%s: empty; expected auto (the default), never, or a checkpoint's path",
                       ddp_job_where(job, "checkpoint", "resume", where, sizeof where));
    return recipe_parse(job, err, errlen);
}

int ddp_recipe_check_data(const struct ddp_job *job, int nd, int channels, char *err, size_t errlen)
{
    char where[DDP_PATH_MAX + 64];
    if ((job->crop_pad || job->hflip) && nd != 3)
        return ddp_err(err, errlen,
                       "%s: random_crop and hflip need images (C, H, W); the "
                       "samples of %s are flat",
                       ddp_job_where(job, "data", "augment", where, sizeof where), job->data_file);
    if (job->norm_channels && job->norm_channels != channels)
        return ddp_err(err, errlen,
                       "%s: %d mean/std pair%s for samples of %d channel%s; give "
                       "one mean and one standard deviation per channel",
                       ddp_job_where(job, "data", "normalize", where, sizeof where),
                       job->norm_channels, job->norm_channels == 1 ? "" : "s", channels,
                       channels == 1 ? "" : "s");
    return 0;
}
