/*
 * test_select.c - the decision that keeps [train] device = auto from training on the CPU by
 * accident (backend/select.h ddp_backend_hidden_gpus): refused exactly where a CUDA driver is
 * installed, CUDA_VISIBLE_DEVICES is set, and no device is left visible; the line names the
 * variable, its value and both fixes.
 */
#include <string.h>

#include "backend/select.h"
#include "check.h"

int main(void)
{
    char err[512];
    const struct {
        int want, driver, ndev;
        const char *cvd;
        int refused;
    } T[] = {
        {DDP_DEVICE_AUTO, 13000, -1, "7", 1},  /* names a GPU that does not exist */
        {DDP_DEVICE_AUTO, 13000, -1, "", 1},   /* hides them all */
        {DDP_DEVICE_AUTO, 13000, 0, "0,1", 1}, /* a count of 0 reads the same */
        {DDP_DEVICE_AUTO, 13000, 2, "0,1", 0}, /* GPUs visible: auto takes one */
        {DDP_DEVICE_AUTO, 13000, -1, NULL, 0}, /* unset: a node without GPUs */
        {DDP_DEVICE_AUTO, 0, -1, "7", 0},      /* no driver: a CPU node */
        {DDP_DEVICE_CPU, 13000, -1, "7", 0},   /* the CPU on purpose */
        {DDP_DEVICE_CUDA, 13000, -1, "7", 0},  /* cuda: the binding's own error */
    };
    for (size_t i = 0; i < sizeof T / sizeof T[0]; i++) {
        err[0] = '\0';
        int rc =
            ddp_backend_hidden_gpus(T[i].want, T[i].driver, T[i].ndev, T[i].cvd, err, sizeof err);
        CHECK(rc == (T[i].refused ? -2 : 0), "case %zu: rc %d", i, rc);
        if (!T[i].refused) {
            CHECK(err[0] == '\0', "case %zu: message %s", i, err);
            continue;
        }
        char want[64];
        snprintf(want, sizeof want, "CUDA_VISIBLE_DEVICES=\"%s\"", T[i].cvd);
        CHECK(strstr(err, want) && strstr(err, "unset CUDA_VISIBLE_DEVICES") &&
                  strstr(err, "[train] device = cpu") && !strchr(err, '\n'),
              "case %zu: %s", i, err);
    }
    return check_report("select");
}
