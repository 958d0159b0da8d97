/*
 * blas_core.h - OpenBLAS's kernels for this CPU.
 *
 * OpenBLAS built with DYNAMIC_ARCH (Debian's) picks its kernels from the CPU's family and model
 * when the library loads. A CPU newer than the library is not in its table or is taken for an
 * older one: Emerald Rapids (model 207) gets the "Prescott" SSE3 kernels under Debian 12's
 * 0.3.21 (SGEMM at a sixth of its AVX-512 kernels: 15 against 93 GFLOP/s on one core), and AMD
 * Zen 4 and Zen 5 get "Haswell" (AVX2), although SkylakeX's AVX-512 kernels run a CNN 1.45x and
 * an MLP 1.7x faster there. Whenever the library's choice is below the CPU's instruction set,
 * ddptrain chooses by the CPU's features instead: AVX-512 (F, BW, DQ, VL) -> SkylakeX, AVX2 +
 * FMA -> Haswell, AVX -> Sandybridge. The choice is OpenBLAS's own OPENBLAS_CORETYPE, which is
 * read only when the library loads, so the process executes itself again, once, before it
 * does anything else.
 *
 * Nothing happens when OPENBLAS_CORETYPE is set (the user's choice wins), when OpenBLAS already
 * chose kernels of the CPU's level or a core this table does not know, under valgrind (its children would run unchecked), or when
 * DDP_BLAS_CORE=keep is set.
 */
#ifndef DDP_BLAS_CORE_H
#define DDP_BLAS_CORE_H

/* Call first in main(): may execute argv again with OPENBLAS_CORETYPE set; returns otherwise. */
void ddp_blas_core_choose(char **argv);

/* The core ddptrain chooses when OpenBLAS chose `have` on a CPU of instruction-set level isa
 * (4 AVX-512, 3 AVX2 + FMA, 2 AVX, 0 older), or NULL to keep OpenBLAS's choice. */
const char *ddp_blas_core_pick(const char *have, int isa);

/* The kernels in use, e.g. "SkylakeX (chosen by ddptrain for this CPU's AVX-512; OpenBLAS took
 * this CPU for Haswell)"
 * or "Haswell". Static storage. */
const char *ddp_blas_core_describe(void);

#endif
