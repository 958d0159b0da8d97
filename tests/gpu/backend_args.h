/*
 * backend_args.h - the backend table's shape and optimiser arguments written in place, for the
 * tests that call the table directly (test_cuda_ops, the twin's test_twin_faults): a
 * struct ddp_conv_geom or struct ddp_optim_args (backend/backend.h) as a compound literal.
 */
#ifndef DDP_TEST_BACKEND_ARGS_H
#define DDP_TEST_BACKEND_ARGS_H

#include "backend/backend.h"

#define CONV_GEOM(C_, H_, W_, O_, k_, stride_, pad_) \
    (&(const struct ddp_conv_geom){(C_), (H_), (W_), (O_), (k_), (stride_), (pad_)})
#define SGD_ARGS(lr_, momentum_, wd_, nesterov_, first_)     \
    (&(const struct ddp_optim_args){.lr = (lr_),             \
                                    .weight_decay = (wd_),   \
                                    .momentum = (momentum_), \
                                    .nesterov = (nesterov_), \
                                    .first_step = (first_)})
#define ADAM_ARGS(lr_, b1_, b2_, eps_, wd_, decoupled_, t_)    \
    (&(const struct ddp_optim_args){.lr = (lr_),               \
                                    .weight_decay = (wd_),     \
                                    .b1 = (b1_),               \
                                    .b2 = (b2_),               \
                                    .eps = (eps_),             \
                                    .decoupled = (decoupled_), \
                                    .t = (t_)})

#endif
