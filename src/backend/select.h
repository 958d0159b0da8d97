/*
 * select.h - which compute backend a rank runs on: its bound GPU (dist/binding.h: the
 * local rank's device among those CUDA_VISIBLE_DEVICES leaves) where the build has CUDA and
 * the job asks for it or the node has GPUs, else the CPU. The only place outside backend/
 * that knows whether CUDA was built in; the trainer and validate ask here.
 */
#ifndef DDP_BACKEND_SELECT_H
#define DDP_BACKEND_SELECT_H

#include <stddef.h>

#include "backend/backend.h"

/* [train] device; ddp_device_names holds the job file's words, in this order. */
enum ddp_device { DDP_DEVICE_AUTO, DDP_DEVICE_CPU, DDP_DEVICE_CUDA, DDP_DEVICE_COUNT };
extern const char *const ddp_device_names[DDP_DEVICE_COUNT];

struct ddp_device_choice {
    const struct ddp_backend *be;
    int device;     /* CUDA ordinal; -1 on the CPU */
    char name[160]; /* "cpu" or "cuda:N (name)" */
};

/* Choose for local rank local_rank of local_size: want (enum ddp_device); need_gpu: the job
 * asked for a GPU-only collective (NCCL), which makes auto take a GPU even where the driver
 * reports none (so that the error names the missing device); precision: [train] precision
 * (enum ddp_precision of backend/backend.h: fp32, tf32 or bf16 GEMMs on the GPU; the CPU computes in
 * fp32 whatever it says, and the trainer refuses bf16 training there).
 * Returns 0, or -1 with one line in err (the caller exits DDP_EXIT_LAUNCH), or -2 with one line
 * when auto finds the GPUs hidden by CUDA_VISIBLE_DEVICES (ddp_backend_hidden_gpus; the
 * caller exits DDP_EXIT_USAGE). */
int ddp_backend_select(int want, int need_gpu, int precision, int local_rank, int local_size,
                       struct ddp_device_choice *out, char *err, size_t errlen);

/* The decision that keeps [train] device = auto from training on the CPU by accident: with a
 * CUDA driver installed (driver_version > 0, ddp_cuda_driver_version) and
 * CUDA_VISIBLE_DEVICES set (cvd; NULL when unset) yet no device visible (ndev <= 0,
 * ddp_cuda_device_count), the variable hides every GPU or names none that exists. Returns 0
 * when auto may go on, or -2 with one line in err naming the variable and its value (the
 * caller exits DDP_EXIT_USAGE). ddp_backend_select applies it; pure, for tests. */
int ddp_backend_hidden_gpus(int want, int driver_version, int ndev, const char *cvd, char *err,
                            size_t errlen);

/* [train] conv: auto (cuDNN where it loads, else im2col + cuBLAS) or im2col (never cuDNN). */
enum ddp_conv { DDP_CONV_AUTO, DDP_CONV_IM2COL, DDP_CONV_COUNT };
extern const char *const ddp_conv_names[DDP_CONV_COUNT];

/* [train] cudnn_api: auto (cuDNN's graph API's engines timed beside the legacy API's
 * algorithms, the fastest kept) or legacy (the legacy API only). */
enum ddp_cudnn_api { DDP_CUDNN_API_AUTO, DDP_CUDNN_API_LEGACY, DDP_CUDNN_API_COUNT };
extern const char *const ddp_cudnn_api_names[DDP_CUDNN_API_COUNT];

/* The convolution path of the chosen device for want (enum ddp_conv), [train] deterministic
 * and api (enum ddp_cudnn_api), set before the model is built; one line for the log in line
 * (which path and cuDNN API run and why; "" on the CPU). Never fails: a missing cuDNN falls
 * back to im2col + cuBLAS, a missing graph API to the legacy API. */
void ddp_backend_conv_path(const struct ddp_device_choice *dev, int want, int deterministic,
                           int api, char *line, size_t len);

/* [train] layout: the activations' memory layout on the GPU. auto: channels-last (NHWC) where
 * the convolutions run through cuDNN in tf32 or bf16 (tensor cores; PyTorch's channels_last
 * advice), else NCHW; nchw; nhwc (a GPU on the cuDNN path, any precision). */
enum ddp_layout_choice {
    DDP_LAYOUT_CHOICE_AUTO,
    DDP_LAYOUT_CHOICE_NCHW,
    DDP_LAYOUT_CHOICE_NHWC,
    DDP_LAYOUT_CHOICE_COUNT
};
extern const char *const ddp_layout_names[DDP_LAYOUT_CHOICE_COUNT];

/* Set the chosen device's activation layout for want (enum ddp_layout_choice) and [train]
 * precision, after ddp_backend_conv_path and before the model is built; what it chose and why
 * in line ("" on the CPU, which keeps NCHW whatever want says). Returns 0, or -1 with one line
 * in err when want is nhwc and the GPU cannot (its convolutions use im2col): the caller names
 * the key. */
int ddp_backend_layout(const struct ddp_device_choice *dev, int want, int precision, char *line,
                       size_t len, char *err, size_t errlen);

/* [train] activations: how the GPU stores activations. auto: bf16 (2 bytes, as PyTorch's
 * autocast keeps them) where [train] precision = bf16 and the backend can (CUDA: the cuDNN
 * convolution path), else fp32; fp32; bf16 (needs precision = bf16, which the trainer checks
 * first, and the cuDNN path). */
enum ddp_act_choice {
    DDP_ACT_CHOICE_AUTO,
    DDP_ACT_CHOICE_FP32,
    DDP_ACT_CHOICE_BF16,
    DDP_ACT_CHOICE_COUNT
};
extern const char *const ddp_act_names[DDP_ACT_CHOICE_COUNT];

/* Set the chosen device's activation storage (backend.h set_act_type) for want (enum
 * ddp_act_choice) and [train] precision, right after ddp_backend_layout and before the model
 * is built; a clause for the log in line when the storage is bf16, or when auto wanted bf16
 * and the GPU cannot ("" otherwise and on the CPU, which stores fp32 whatever want says).
 * Returns 0, or -1 with one line in err when want is bf16 and the GPU cannot (its
 * convolutions use im2col): the caller names the key. */
int ddp_backend_act_type(const struct ddp_device_choice *dev, int want, int precision, char *line,
                         size_t len, char *err, size_t errlen);

/* After the model is built: the convolution algorithms its build chose, one line per shape
 * and batch size (backend/cuda.h ddp_cuda_conv_report); "" and 0 on the CPU or without cuDNN.
 * Returns the number of lines. */
int ddp_backend_conv_report(char *out, size_t len);

/* The convolution algorithms chosen so far as text (backend/cuda.h ddp_cuda_conv_choices), and
 * taking such text back (ddp_cuda_conv_adopt: rank 0's choices on every rank, a checkpoint's
 * on resume, there only from the same device and cuDNN). On the CPU or without cuDNN: 0 and
 * nothing taken. */
size_t ddp_backend_conv_choices(char *out, size_t len);
int ddp_backend_conv_adopt(const char *text, int same_device, char *why, size_t whylen);

#endif
