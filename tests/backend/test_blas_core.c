/*
 * test_blas_core.c - which OpenBLAS kernels ddptrain asks for (backend/blas_core.h): whenever the
 * library's own choice is below what the CPU can run, the CPU's level decides (AVX-512 ->
 * SkylakeX, AVX2 + FMA -> Haswell, AVX -> Sandybridge); a choice at or above the CPU's level, or
 * a core the table does not know, is kept.
 */
#include <string.h>

#include "backend/blas_core.h"
#include "check.h"

static void expect(const char *have, int isa, const char *want)
{
    const char *got = ddp_blas_core_pick(have, isa);
    CHECK(want ? got && strcmp(got, want) == 0 : got == NULL, "have %s, level %d: got %s, want %s",
          have ? have : "(null)", isa, got ? got : "keep", want ? want : "keep");
}

int main(void)
{
    /* AMD Zen 4 / Zen 5 under OpenBLAS 0.3.21: taken for Haswell (or Zen), AVX-512 available */
    expect("Haswell", 4, "SkylakeX");
    expect("Zen", 4, "SkylakeX");
    /* a CPU newer than the library's table: the SSE3 fallback */
    expect("Prescott", 4, "SkylakeX");
    expect("Prescott", 3, "Haswell");
    expect("Nehalem", 3, "Haswell");
    expect("Sandybridge", 3, "Haswell");
    expect("Core2", 2, "Sandybridge");
    expect("Generic", 2, "Sandybridge");
    /* already at the CPU's level, or above it: kept */
    expect("Haswell", 3, NULL);
    expect("Zen", 3, NULL);
    expect("SkylakeX", 4, NULL);
    expect("Cooperlake", 4, NULL);
    expect("SapphireRapids", 4, NULL);
    expect("SkylakeX", 3, NULL);
    expect("Sandybridge", 2, NULL);
    /* a CPU without AVX: nothing better to offer */
    expect("Prescott", 0, NULL);
    /* a core newer than the table (or another architecture's): kept */
    expect("Zen5", 4, NULL);
    expect("ARMV8", 4, NULL);
    expect(NULL, 4, NULL);
    /* case does not matter: OpenBLAS names cores in either */
    expect("HASWELL", 4, "SkylakeX");
    expect("haswell", 3, NULL);
    return check_report("test_blas_core");
}
