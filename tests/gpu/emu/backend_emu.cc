/*
 * backend_emu.cc - src/backend/cuda.cu, unchanged, compiled by the host C++ compiler against
 * the CPU emulation of cuda_emu.h (DDP_CUDA_EMU): test_cuda_ops_emu then runs every kernel
 * of the CUDA backend on any machine.
 */
#define DDP_CUDA_EMU 1
#include "backend/cuda.cu"
