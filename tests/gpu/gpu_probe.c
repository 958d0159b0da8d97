/*
 * gpu_probe.c - is there a GPU this build can use? Prints one line (the device and the CUDA,
 * cuBLAS and NCCL versions, or why not) and exits 0 (usable) or 77 (no CUDA in this build, no
 * driver, no device): the scripts of suite gpu skip on 77 (tests/gpu/train_curve.sh).
 */
#include "ddp_build.h"

#include <stdio.h>

#include "core/util.h"
#if HAVE_CUDA
#include "backend/cuda.h"
#endif
#if HAVE_NCCL
#include "comm/comm_nccl.h"
#endif

int main(void)
{
#if HAVE_CUDA
    char err[DDP_ERR_LEN];
    if (!ddp_backend_cuda(0, 0, err, sizeof err)) {
        printf("no GPU: %s (%s)\n", err, ddp_cuda_version_string());
        return 77;
    }
    printf("GPU 0: %s; %s; %s\n", ddp_cuda_device_string(), ddp_cuda_version_string(),
#if HAVE_NCCL
           ddp_nccl_version_string()
#else
           "no NCCL"
#endif
    );
    return 0;
#else
    printf("no GPU: this ddptrain was built without CUDA\n");
    return 77;
#endif
}
