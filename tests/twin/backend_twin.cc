/*
 * backend_twin.cc - src/backend/cuda.cu, unchanged, compiled by the host C++ compiler against
 * the GPU twin (DDP_CUDA_TWIN): the CUDA backend of ddptrain-twin and the twin GPU tests.
 */
#define DDP_CUDA_TWIN 1
#include "backend/cuda.cu"
