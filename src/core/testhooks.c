/*
 * testhooks.c - reads the DDP_TEST_* variables once (testhooks.h). A malformed value leaves
 * its hook off, as an unset one does.
 */
#include "core/testhooks.h"

#include <stdio.h>
#include <stdlib.h>

static struct ddp_test_hooks g_hooks;
static int g_read;

const struct ddp_test_hooks *ddp_test_hooks(void)
{
    if (g_read)
        return &g_hooks;
    struct ddp_test_hooks *h = &g_hooks;
    h->trace = getenv("DDP_TEST_TRACE");
    h->sample_log = getenv("DDP_TEST_SAMPLE_LOG");
    h->validate_fault = getenv("DDP_TEST_VALIDATE_FAULT");
    h->fake_gpus = getenv("DDP_TEST_FAKE_GPUS");
    const char *flip = getenv("DDP_TEST_FLIP_BIT");
    h->flip_rank = h->flip_step = -1;
    if (flip && sscanf(flip, "%lld:%lld", &h->flip_rank, &h->flip_step) != 2)
        h->flip_rank = h->flip_step = -1;
    const char *fault = getenv("DDP_TEST_FAULT");
    h->fault_rank = h->fault_step = -1;
    if (fault && sscanf(fault, "%lld:%lld:%7[a-z]:%lf", &h->fault_rank, &h->fault_step,
                        h->fault_action, &h->fault_arg) != 4)
        h->fault_rank = h->fault_step = -1;
    g_read = 1;
    return h;
}
