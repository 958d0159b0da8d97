/*
 * cli/version.c - `ddptrain --version` (what was built in, the libraries' versions, and the
 * data directory with the shipped configs and references, core/paths.h) and
 * `ddptrain --job-reference` (the job schema as Markdown, job/config.h).
 */
#include <cblas.h>
#include <hdf5.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "ddp_build.h"
#include "cli/cli.h"
#include "job/config.h"
#include "core/paths.h"
#include "core/util.h"
#if HAVE_MPI
#include <mpi.h>
#endif
#if HAVE_CUDA
#include "backend/cuda.h"
#endif
#if HAVE_NCCL
#include "comm/comm_nccl.h"
#endif

#include "backend/blas_core.h"

char *openblas_get_config(void);

int ddp_cmd_version(int argc, char **argv)
{
    unsigned maj, min, rel;
    H5get_libversion(&maj, &min, &rel);
    printf("ddptrain %s\n", DDP_VERSION);
    printf("compute backends: cpu (%s; kernels %s)", openblas_get_config(),
           ddp_blas_core_describe());
#if HAVE_CUDA
    printf(", cuda (%s)", ddp_cuda_version_string());
#endif
    printf("\n");
    printf("comm backends: self");
#if HAVE_MPI
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(lib, &len);
    char *nl = strchr(lib, ',');
    if (nl)
        *nl = '\0';
    printf(", mpi (%s)", lib);
#endif
#if HAVE_NCCL
    printf(", nccl (%s)", ddp_nccl_version_string());
#endif
    printf("\nbootstrap: %s%stcp\n", HAVE_PMI2 ? "pmi2, " : "", HAVE_MPI ? "mpi, " : "");
    printf("hdf5: %u.%u.%u\n", maj, min, rel);
    char data[PATH_MAX * 2 + 8];
    const char *origin = "none";
    int found = ddp_paths_data_dir(data, sizeof data, &origin);
    printf("data: %s%s (%s)\n", found ? "" : "not found in ", data, origin);
    return 0;
}

int ddp_cmd_job_reference(int argc, char **argv)
{
    ddp_job_write_reference(stdout);
    return 0;
}
