#!/bin/bash
# blas_core.sh - OpenBLAS's kernels follow the CPU's features (src/backend/blas_core.h):
#  1. with nothing set, `ddptrain --version` names kernels of the CPU's level: AVX-512 kernels
#     (SkylakeX or newer) on a CPU with AVX-512 F/BW/DQ/VL, at least AVX2 ones on an AVX2+FMA
#     CPU, never the SSE3 fallback;
#  2. OPENBLAS_CORETYPE set by the user is kept as it is;
#  3. DDP_BLAS_CORE=keep leaves the library's own choice;
#  4. a training run logs the kernels it uses.
set -u
DDPTRAIN=${DDPTRAIN:?}
fail=0
no() { echo "FAIL: $*"; fail=1; }
kernels() { env "$@" "$DDPTRAIN" --version | sed -n 's/.*; kernels \([A-Za-z0-9]*\).*/\1/p'; }
unset OPENBLAS_CORETYPE DDP_BLAS_CORE DDP_BLAS_CORE_FROM

k=$(kernels)
[ -n "$k" ] || no "--version names no kernels: $("$DDPTRAIN" --version | head -2)"
flags=$(grep -m1 '^flags' /proc/cpuinfo)
has() { for f in "$@"; do [[ " $flags " == *" $f "* ]] || return 1; done; }
if has avx512f avx512bw avx512dq avx512vl; then
    case $k in
    SkylakeX|Cooperlake|SapphireRapids) echo "ok: kernels $k on a CPU with AVX-512" ;;
    *) no "AVX-512 CPU but kernels '$k' (want SkylakeX or newer)" ;;
    esac
elif has avx2 fma; then
    case $k in
    Prescott|Core2|Penryn|Dunnington|Nehalem|Atom|Generic|'') no "AVX2 CPU but kernels '$k'" ;;
    *) echo "ok: kernels $k on a CPU with AVX2" ;;
    esac
else
    echo "note: no AVX2 on this CPU; kernels $k"
fi
k=$(kernels OPENBLAS_CORETYPE=Haswell)
[ "$k" = Haswell ] || no "OPENBLAS_CORETYPE=Haswell gave kernels '$k'"
lib=$(kernels DDP_BLAS_CORE=keep)
"$DDPTRAIN" --version | grep -q "took this CPU for $lib" || [ "$lib" = "$(kernels)" ] ||
    no "DDP_BLAS_CORE=keep gave '$lib', neither the library's choice nor the one used"

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
printf '[data]\nfile = %s/d.h5\n[model]\nlayers = flatten, linear(3)\n[train]\nepochs = 1\n[job]\noutput = %s/out\n' \
    "$dir" "$dir" > "$dir/job.ini"
"$DDPTRAIN" data synth -o "$dir/d.h5" --train 64 --test 16 --shape 1,4,4 --classes 3 \
    > /dev/null 2>&1 || no "data synth failed"
"$DDPTRAIN" "$dir/job.ini" > "$dir/log" 2>&1 || no "training run failed: $(tail -3 "$dir/log")"
grep -q 'cpu kernels: OpenBLAS ' "$dir/log" || no "the run does not log its kernels"
[ $fail = 0 ] && echo "PASS blas_core"
exit $fail
