/*
 * test_optim.c - optimiser updates against PyTorch-rule values and the lr schedule.
 *
 * Expected parameters after three steps from p = (1, -2, 0.5, 0) with gradients g1, g2, g3,
 * computed by hand from the rules in docs/training.md (and identical to torch.optim in
 * PyTorch 1.13 to the digits shown). Plain SGD, for instance: 1 - 0.1 (0.1 + 0.5 - 0.2) = 0.96.
 * The lr schedules at the epochs where they change: multistep at milestone - 1, milestone and
 * milestone + 1, with and without warmup, against exact values.
 */
#include <math.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu_ref.h"
#include "check.h"
#include "job/config.h"
#include "train/optim.h"

static const double P0[4] = {1.0, -2.0, 0.5, 0.0};
static const double G[3][4] = {
    {0.1, -0.3, 0.7, -1.2}, {0.5, 0.2, -0.4, 0.05}, {-0.2, 0.6, 0.3, 0.9}};

struct opt_case {
    const char *name;
    int kind; /* 0 sgd, 1 adam, 2 adamw */
    double lr, momentum, wd;
    int nesterov;
    double want[4];
};

static const struct opt_case CASES[] = {
    {"sgd", 0, 0.1, 0, 0, 0, {0.96, -2.05, 0.44, 0.025}},
    {"sgd momentum", 0, 0.1, 0.9, 0, 0, {0.8979, -2.0167, 0.3563, 0.2257}},
    {"sgd nesterov", 0, 0.1, 0.9, 0, 1, {0.86811, -2.06503, 0.31067, 0.22813}},
    {"sgd momentum wd",
     0,
     0.1,
     0.9,
     0.01,
     0,
     {0.892382789, -2.005583568, 0.3537233295, 0.22524912}},
    {"adam", 1, 0.01, 0, 0, 0, {0.977527318524, -1.993456507928, 0.484108413726, 0.016499820891}},
    {"adam wd",
     1,
     0.01,
     0,
     0.1,
     0,
     {0.974833254500, -1.983290088787, 0.482531229117, 0.016482518957}},
    {"adamw",
     2,
     0.01,
     0,
     0.1,
     0,
     {0.974558917985, -1.987483941132, 0.482632026899, 0.016473446066}},
};

static void run(const struct opt_case *c)
{
    double p[4], b1[4] = {0}, b2[4] = {0};
    float pf[4], g1f[4] = {0}, g2f[4] = {0};
    memcpy(p, P0, sizeof p);
    for (int i = 0; i < 4; i++)
        pf[i] = (float)P0[i];
    for (int t = 0; t < 3; t++) {
        float gf[4];
        for (int i = 0; i < 4; i++)
            gf[i] = (float)G[t][i];
        if (c->kind == 0) {
            ddp_cpu_sgd_step_f64(p, G[t], 1, b1, 4, c->lr, c->momentum, c->wd, c->nesterov, t == 0);
            ddp_cpu_sgd_step_f32(pf, gf, 1, g1f, 4, (float)c->lr, (float)c->momentum, (float)c->wd,
                                 c->nesterov, t == 0);
        } else {
            ddp_cpu_adam_step_f64(p, G[t], 1, b1, b2, 4, c->lr, 0.9, 0.999, 1e-8, c->wd,
                                  c->kind == 2, t + 1);
            ddp_cpu_adam_step_f32(pf, gf, 1, g1f, g2f, 4, (float)c->lr, 0.9f, 0.999f, 1e-8f,
                                  (float)c->wd, c->kind == 2, t + 1);
        }
    }
    for (int i = 0; i < 4; i++) {
        CHECK(fabs(p[i] - c->want[i]) < 1e-9, "%s p[%d] = %.12f, want %.12f", c->name, i, p[i],
              c->want[i]);
        CHECK(fabs(pf[i] - c->want[i]) < 2e-6, "%s (f32) p[%d] = %.9f, want %.9f", c->name, i,
              pf[i], c->want[i]);
    }
}

/* The ranks' summed gradients with gscale = 1/W give bit for bit what averaging first (a
 * separate pass g *= 1/W) and gscale = 1 give, for every optimiser and option combination. */
static void check_grad_scale(void)
{
    enum { N = 1000 };
    static float g[N], gavg[N], p1[N], p2[N], a1[N], a2[N], b1[N], b2[N];
    for (int W = 2; W <= 7; W++) {
        const float inv = 1.0f / (float)W;
        for (int i = 0; i < N; i++) {
            g[i] = (float)sin(0.37 * i + W) * (float)W;
            gavg[i] = g[i] * inv;
        }
        for (int combo = 0; combo < 11; combo++) {
            for (int i = 0; i < N; i++) {
                p1[i] = p2[i] = (float)cos(0.11 * i);
                a1[i] = a2[i] = b1[i] = b2[i] = 0;
            }
            for (int t = 0; t < 3; t++) {
                if (combo < 8) { /* sgd: wd, momentum, nesterov bits */
                    float wd = combo & 1 ? 0.01f : 0, mom = combo & 2 ? 0.9f : 0;
                    int nest = (combo & 6) == 6;
                    ddp_cpu_sgd_step_f32(p1, g, inv, a1, N, 0.1f, mom, wd, nest, t == 0);
                    ddp_cpu_sgd_step_f32(p2, gavg, 1, a2, N, 0.1f, mom, wd, nest, t == 0);
                } else { /* adam, adam + wd, adamw */
                    float wd = combo > 8 ? 0.1f : 0;
                    ddp_cpu_adam_step_f32(p1, g, inv, a1, b1, N, 0.01f, 0.9f, 0.999f, 1e-8f, wd,
                                          combo == 10, t + 1);
                    ddp_cpu_adam_step_f32(p2, gavg, 1, a2, b2, N, 0.01f, 0.9f, 0.999f, 1e-8f, wd,
                                          combo == 10, t + 1);
                }
            }
            CHECK(memcmp(p1, p2, sizeof p1) == 0 && memcmp(a1, a2, sizeof a1) == 0 &&
                      memcmp(b1, b2, sizeof b1) == 0,
                  "W=%d combination %d: gscale 1/W differs from averaging first", W, combo);
        }
    }
}

static void check_schedule(void)
{
    struct ddp_job job;
    ddp_job_defaults(&job);
    job.lr = 0.1;
    job.epochs = 10;
    struct ddp_optim o;
    const struct ddp_backend *be = ddp_backend_cpu();

    ddp_optim_init(&o, be, &job, 4, 4); /* lr_scaling none */
    CHECK(fabs(ddp_optim_lr(&o, 3, 5, 100) - 0.1) < 1e-15, "constant lr");
    ddp_optim_free(&o);

    job.lr_scaling = DDP_LR_SCALING_LINEAR;
    ddp_optim_init(&o, be, &job, 4, 4);
    CHECK(fabs(ddp_optim_lr(&o, 0, 0, 100) - 0.4) < 1e-15, "linear scaling: lr x 4");
    ddp_optim_free(&o);
    job.lr_scaling = DDP_LR_SCALING_SQRT;
    ddp_optim_init(&o, be, &job, 4, 4);
    CHECK(fabs(ddp_optim_lr(&o, 0, 0, 100) - 0.2) < 1e-15, "sqrt scaling: lr x 2");
    ddp_optim_free(&o);
    job.lr_scaling = DDP_LR_SCALING_NONE;

    job.schedule = DDP_SCHEDULE_STEP;
    job.step_epochs = 3;
    job.gamma = 0.5;
    ddp_optim_init(&o, be, &job, 4, 1);
    CHECK(fabs(ddp_optim_lr(&o, 2, 99, 100) - 0.1) < 1e-15, "step: epoch 2 still 0.1");
    CHECK(fabs(ddp_optim_lr(&o, 3, 0, 100) - 0.05) < 1e-15, "step: epoch 3 halves");
    CHECK(fabs(ddp_optim_lr(&o, 7, 0, 100) - 0.025) < 1e-15, "step: epoch 7 quarter");
    ddp_optim_free(&o);

    job.schedule = DDP_SCHEDULE_COSINE;
    ddp_optim_init(&o, be, &job, 4, 1);
    CHECK(fabs(ddp_optim_lr(&o, 0, 0, 100) - 0.1) < 1e-15, "cosine starts at lr");
    CHECK(fabs(ddp_optim_lr(&o, 5, 0, 100) - 0.05) < 1e-12, "cosine half way is lr/2");
    ddp_optim_free(&o);

    job.schedule = DDP_SCHEDULE_CONSTANT;
    job.warmup_epochs = 2;
    ddp_optim_init(&o, be, &job, 4, 1);
    CHECK(fabs(ddp_optim_lr(&o, 0, 0, 100) - 0.1 / 200) < 1e-15, "warmup first step");
    CHECK(fabs(ddp_optim_lr(&o, 1, 149, 100) - 0.1 * 150 / 200) < 1e-15, "warmup mid");
    CHECK(fabs(ddp_optim_lr(&o, 2, 200, 100) - 0.1) < 1e-15, "after warmup");
    ddp_optim_free(&o);
}

/* lr of the optimiser o at `epoch` (any step of it: the first and the last must agree). */
static double lr_at(const struct ddp_optim *o, int64_t epoch, int64_t spe)
{
    double first = ddp_optim_lr(o, epoch, epoch * spe, spe);
    double last = ddp_optim_lr(o, epoch, epoch * spe + spe - 1, spe);
    CHECK(first == last, "epoch %lld: lr %.17g at its first step, %.17g at its last",
          (long long)epoch, first, last);
    return first;
}

/* multistep as MultiStepLR stepped per epoch: lr x gamma^(milestones <= e), e counted from the
 * end of warmup, so a milestone m drops lr in (post-warmup) epoch m, not m + 1 and not m - 1.
 * Expected values are exact products of the job's numbers. */
static void check_multistep(void)
{
    struct ddp_job job;
    ddp_job_defaults(&job);
    job.lr = 0.1;
    job.epochs = 12;
    job.schedule = DDP_SCHEDULE_MULTISTEP;
    job.gamma = 0.5; /* powers of 0.5: every expected value is exact */
    job.milestones[0] = 3;
    job.milestones[1] = 6;
    job.nmilestones = 2;
    const int64_t spe = 100;
    const struct ddp_backend *be = ddp_backend_cpu();
    struct ddp_optim o;
    for (int warm = 0; warm <= 2; warm += 2) {
        job.warmup_epochs = warm;
        ddp_optim_init(&o, be, &job, 4, 1);
        const double want[] = {/* post-warmup epoch 0 .. 7 */
                               0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.025, 0.025};
        for (int e = 0; e < 8; e++) {
            double got = lr_at(&o, warm + e, spe);
            CHECK(got == want[e],
                  "multistep, warmup %d: epoch %d (milestones 3, 6) lr %.17g, want %g", warm,
                  warm + e, got, want[e]);
        }
        if (warm) { /* linear warmup per step, then the schedule's first value */
            double w = warm * (double)spe;
            CHECK(ddp_optim_lr(&o, 0, 0, spe) == 0.1 / w, "multistep warmup: first step");
            CHECK(ddp_optim_lr(&o, 1, (int64_t)w - 1, spe) == 0.1,
                  "multistep warmup: last warmup step reaches lr");
            CHECK(ddp_optim_lr(&o, 1, 150, spe) == 0.1 * 151 / w, "multistep warmup: mid");
        }
        ddp_optim_free(&o);
    }
}

int main(void)
{
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++)
        run(&CASES[i]);
    check_grad_scale();
    check_schedule();
    check_multistep();
    return check_report("test_optim");
}
