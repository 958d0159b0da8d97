/*
 * blas_core.h - OpenBLAS's kernels for this CPU.
 *
 * OpenBLAS built with DYNAMIC_ARCH (Debian's) picks its kernels from the CPU's family and model
 * when the library loads. A CPU newer than the library (Emerald Rapids, model 207, under
 * Debian 12's 0.3.21) is not in its table and gets the "Prescott" SSE3 kernels: SGEMM runs at
 * a sixth of what the CPU's AVX-512 kernels reach (15 against 93 GFLOP/s on one core here).
 * ddptrain then chooses by the CPU's features instead: AVX-512 (F, BW, DQ, VL) -> SkylakeX,
 * AVX2 + FMA -> Haswell. The choice is OpenBLAS's own OPENBLAS_CORETYPE, which is read only when
 * the library loads, so the process executes itself again, once, before it does anything else.
 *
 * Nothing happens when OPENBLAS_CORETYPE is set (the user's choice wins), when OpenBLAS already
 * chose a modern core, under valgrind (its children would run unchecked), or when
 * DDP_BLAS_CORE=keep is set.
 */
#ifndef DDP_BLAS_CORE_H
#define DDP_BLAS_CORE_H

/* Call first in main(): may execute argv again with OPENBLAS_CORETYPE set; returns otherwise. */
void ddp_blas_core_choose(char **argv);

/* The kernels in use, e.g. "SkylakeX (chosen by ddptrain; OpenBLAS took the CPU for Prescott)"
 * or "Haswell". Static storage. */
const char *ddp_blas_core_describe(void);

#endif
