/*
 * select.c - device choice (select.h).
 */
#include "backend/select.h"

#include <stdio.h>
#include <stdlib.h>

#include "ddp_build.h"
#include "core/util.h"
#include "dist/binding.h"
#if HAVE_CUDA
#include "backend/cuda.h"
#endif

const char *const ddp_device_names[DDP_DEVICE_COUNT] = {"auto", "cpu", "cuda"};
_Static_assert(sizeof ddp_device_names / sizeof *ddp_device_names == DDP_DEVICE_COUNT,
               "one name per device kind");
const char *const ddp_conv_names[DDP_CONV_COUNT] = {"auto", "im2col"};
_Static_assert(sizeof ddp_conv_names / sizeof *ddp_conv_names == DDP_CONV_COUNT,
               "one name per convolution path");
const char *const ddp_layout_names[DDP_LAYOUT_CHOICE_COUNT] = {"auto", "nchw", "nhwc"};
_Static_assert(sizeof ddp_layout_names / sizeof *ddp_layout_names == DDP_LAYOUT_CHOICE_COUNT,
               "one name per layout");

const char *const ddp_act_names[DDP_ACT_CHOICE_COUNT] = {"auto", "fp32", "bf16"};
_Static_assert(sizeof ddp_act_names / sizeof *ddp_act_names == DDP_ACT_CHOICE_COUNT,
               "one name per activation storage");
const char *const ddp_cudnn_api_names[DDP_CUDNN_API_COUNT] = {"auto", "legacy"};
_Static_assert(sizeof ddp_cudnn_api_names / sizeof *ddp_cudnn_api_names == DDP_CUDNN_API_COUNT,
               "one name per enum ddp_cudnn_api value");

int ddp_backend_hidden_gpus(int want, int driver_version, int ndev, const char *cvd, char *err,
                            size_t errlen)
{
    if (want != DDP_DEVICE_AUTO || driver_version <= 0 || ndev > 0 || !cvd)
        return 0;
    ddp_err(err, errlen,
            "[train] device = auto on a node with the CUDA driver, but "
            "CUDA_VISIBLE_DEVICES=\"%.100s\" leaves no GPU visible (it hides them all or names "
            "none that exists), so this rank would train on the CPU; unset CUDA_VISIBLE_DEVICES "
            "or name GPUs that exist (nvidia-smi -L), or set [train] device = cpu to train on "
            "the CPU",
            cvd);
    return -2;
}

int ddp_backend_select(int want, int need_gpu, int precision, int local_rank, int local_size,
                       struct ddp_device_choice *out, char *err, size_t errlen)
{
    out->be = ddp_backend_cpu();
    out->device = -1;
    snprintf(out->name, sizeof out->name, "cpu");
#if HAVE_CUDA
    int ndev = ddp_cuda_device_count();
    if (ddp_backend_hidden_gpus(want, ndev > 0 ? 0 : ddp_cuda_driver_version(), ndev,
                                getenv("CUDA_VISIBLE_DEVICES"), err, errlen) != 0)
        return -2;
    if (want == DDP_DEVICE_CUDA || (want == DDP_DEVICE_AUTO && (ndev > 0 || need_gpu))) {
        struct ddp_binding bind = {.device = -1};
        if (ddp_binding_compute(local_rank, local_size, ndev, 1, NULL, NULL, &bind, err, errlen) !=
            0)
            return -1;
        const struct ddp_backend *be = ddp_backend_cuda(bind.device, precision, err, errlen);
        if (!be)
            return -1;
        out->be = be;
        out->device = bind.device;
        snprintf(out->name, sizeof out->name, "cuda:%d (%s)", bind.device,
                 ddp_cuda_device_string());
    }
#else
    (void)local_rank, (void)local_size, (void)precision;
    if (want == DDP_DEVICE_CUDA || need_gpu)
        return ddp_err(err, errlen,
                       "[train] device = cuda or [dist] backend = nccl, but this "
                       "ddptrain was built without CUDA/NCCL; use the CPU (ddptrain --version "
                       "lists the backends)");
#endif
    return 0;
}

void ddp_backend_conv_path(const struct ddp_device_choice *dev, int want, int deterministic,
                           int api, char *line, size_t len)
{
    if (len)
        line[0] = 0;
#if HAVE_CUDA
    if (dev->device >= 0) {
        ddp_cuda_conv_api(api != DDP_CUDNN_API_LEGACY);
        ddp_cuda_conv_path(want != DDP_CONV_IM2COL, deterministic, line, len);
    }
#else
    (void)dev, (void)want, (void)deterministic, (void)api;
#endif
}

int ddp_backend_layout(const struct ddp_device_choice *dev, int want, int precision, char *line,
                       size_t len, char *err, size_t errlen)
{
    const struct ddp_backend *be = dev->be;
    char why[DDP_ERR_LEN];
    if (len)
        line[0] = 0;
    if (dev->device < 0 || !be->set_layout) /* the CPU: NCHW, whatever the job says */
        return 0;
    const int nhwc = want == DDP_LAYOUT_CHOICE_NHWC ||
                     (want == DDP_LAYOUT_CHOICE_AUTO && precision != DDP_PRECISION_FP32);
    if (nhwc && be->set_layout(DDP_LAYOUT_NHWC, why, sizeof why) == 0) {
        snprintf(line, len, "activations channels-last (NHWC%s)",
                 want == DDP_LAYOUT_CHOICE_AUTO ? ": [train] layout = auto for tensor-core math"
                                                : "");
        return 0;
    }
    if (nhwc && want == DDP_LAYOUT_CHOICE_NHWC)
        return ddp_err(err, errlen, "%s", why);
    be->set_layout(DDP_LAYOUT_NCHW, why, sizeof why);
    snprintf(line, len, "activations NCHW%s%s", nhwc ? ": channels-last needs cuDNN, and " : "",
             nhwc ? why : "");
    return 0;
}

int ddp_backend_act_type(const struct ddp_device_choice *dev, int want, int precision, char *line,
                         size_t len, char *err, size_t errlen)
{
    const struct ddp_backend *be = dev->be;
    char why[DDP_ERR_LEN];
    if (len)
        line[0] = 0;
    if (dev->device < 0 || !be->set_act_type) /* the CPU: fp32, whatever the job says */
        return 0;
    const int bf16 = want == DDP_ACT_CHOICE_BF16 ||
                     (want == DDP_ACT_CHOICE_AUTO && precision == DDP_PRECISION_BF16);
    if (bf16 && be->set_act_type(DDP_ACT_BF16, why, sizeof why) == 0) {
        snprintf(line, len, "stored as bf16%s",
                 want == DDP_ACT_CHOICE_AUTO ? " ([train] activations = auto under bf16)" : "");
        return 0;
    }
    if (bf16 && want == DDP_ACT_CHOICE_BF16)
        return ddp_err(err, errlen, "%s", why);
    be->set_act_type(DDP_ACT_FP32, why, sizeof why);
    if (bf16) /* the convolution path before names the reason (im2col) */
        snprintf(line, len, "stored as fp32 (bf16 storage needs cuDNN's convolutions)");
    return 0;
}

int ddp_backend_conv_report(char *out, size_t len)
{
#if HAVE_CUDA
    return ddp_cuda_conv_report(out, len);
#else
    if (len)
        out[0] = 0;
    return 0;
#endif
}

size_t ddp_backend_conv_choices(char *out, size_t len)
{
#if HAVE_CUDA
    return ddp_cuda_conv_choices(out, len);
#else
    if (len)
        out[0] = 0;
    return 0;
#endif
}

int ddp_backend_conv_adopt(const char *text, int same_device, char *why, size_t whylen)
{
#if HAVE_CUDA
    return ddp_cuda_conv_adopt(text, same_device, why, whylen);
#else
    (void)text, (void)same_device, (void)why, (void)whylen;
    return 0;
#endif
}
