#!/bin/bash
# lazy_cublas.sh - cuBLAS is opened only when a GPU backend is made (src/backend/cuda/dlopen.cu):
# commands and CPU training never load it (its libraries' start-up costs 50-70 ms), and the
# run-time loading works: `ddptrain --version` opens it and reports its version. Needs no GPU;
# skipped (77) in a build without CUDA. With device=auto, training loads cuBLAS exactly when
# gpu_probe finds a usable GPU (then auto trains on it). NCCL likewise is not linked
# (comm_nccl.c opens it): with libnccl hidden (as root, in a private mount namespace)
# `ddptrain --version` still runs and says the library is not found. cuDNN (where the build
# has it) is opened by the GPU backend's convolution path and --version only.
set -u
DDPTRAIN=${DDPTRAIN:?}
src=${DDP_SRC:?}
if ! "$DDPTRAIN" --version | grep -q "cuda ("; then
    echo "SKIP: this build has no CUDA backend"
    exit 77
fi
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }
loads_cublas() { LD_DEBUG=files "$@" 2>&1 >/dev/null | grep -q "file=libcublas"; }

ldd "$DDPTRAIN" | grep -q "libcublas" && bad "ddptrain links cuBLAS (ldd)" || ok "not linked"
for cmd in "--help" "hostlist n[1-4]" "env"; do
    # shellcheck disable=SC2086
    if loads_cublas "$DDPTRAIN" $cmd; then
        bad "ddptrain $cmd loads cuBLAS"
    else
        ok "ddptrain $cmd: no cuBLAS"
    fi
done
probe=${GPU_PROBE:-${DDP_BUILD:?}/tests/gpu/gpu_probe}
if "$probe" >/dev/null; then has_gpu=1; else has_gpu=0; fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$DDPTRAIN" data synth -o "$work/d.h5" --shape 1,8,8 --classes 3 --train 64 --test 16 >/dev/null
for dev in cpu auto; do
    if ! LD_DEBUG=files "$DDPTRAIN" "$src/configs/seed-simple.ini" --set data.file="$work/d.h5" \
            --set train.device=$dev --set train.max_steps=2 --set job.output="$work/o-$dev" \
            >/dev/null 2>"$work/ld-$dev" || [ ! -s "$work/o-$dev/model.h5" ]; then
        bad "training with device=$dev failed"; grep -v "file=" "$work/ld-$dev" | tail -3
        continue
    fi
    want=0
    [ $dev = auto ] && want=$has_gpu
    got=$(grep -q "file=libcublas" "$work/ld-$dev" && echo 1 || echo 0)
    if [ "$got" != "$want" ]; then
        bad "training with device=$dev (usable GPU: $has_gpu) loads cuBLAS: $got, expected $want"
    else
        ok "training with device=$dev (2 steps, model.h5 written; usable GPU: $has_gpu):" \
            "cuBLAS loaded: $got"
    fi
done
v=$("$DDPTRAIN" --version)
if echo "$v" | grep -Eq "cuBLAS [0-9]+\.[0-9]+\.[0-9]+," &&
        ! echo "$v" | grep -q "library not found" && loads_cublas "$DDPTRAIN" --version; then
    ok "--version opens cuBLAS at run time: $(echo "$v" | grep -o 'cuBLAS [0-9.]*')"
else
    bad "--version did not open cuBLAS: $v"
fi
# cuDNN likewise: opened by a GPU backend's convolution path and by --version, never by
# commands or CPU training
if echo "$v" | grep -Eq "cuDNN [0-9]+\.[0-9]+\.[0-9]+,"; then
    loads_cudnn() { LD_DEBUG=files "$@" 2>&1 >/dev/null | grep -q "file=libcudnn"; }
    for cmd in "--help" "env"; do
        # shellcheck disable=SC2086
        loads_cudnn "$DDPTRAIN" $cmd && bad "ddptrain $cmd loads cuDNN" || ok "ddptrain $cmd: no cuDNN"
    done
    grep -q "file=libcudnn" "$work/ld-cpu" && bad "training with device=cpu loads cuDNN" ||
        ok "training with device=cpu: no cuDNN"
    loads_cudnn "$DDPTRAIN" --version && ok "--version opens cuDNN: $(echo "$v" | grep -o 'cuDNN [0-9.]*')" ||
        bad "--version reports cuDNN without opening it"
else
    echo "note: $(echo "$v" | grep -o 'cuDNN [a-z ]*'): cuDNN's loading is not checked"
fi
if "$DDPTRAIN" --version | grep -q "nccl ("; then
    ldd "$DDPTRAIN" | grep -q "libnccl" && bad "ddptrain links NCCL (ldd)" || ok "NCCL not linked"
    nccl=$(ldconfig -p | awk '/libnccl\.so\.2 /{print $NF; exit}')
    if [ -n "$nccl" ] && [ "$(id -u)" = 0 ] && unshare -m true 2>/dev/null; then
        v=$(unshare -m sh -c "mount --bind /dev/null '$nccl' && '$DDPTRAIN' --version" 2>&1)
        if [ $? = 0 ] && echo "$v" | grep -q "nccl (NCCL [0-9.]* (library not found))"; then
            ok "--version with $nccl hidden: $(echo "$v" | grep -o 'nccl (.*')"
        else
            bad "--version with $nccl hidden: $v"
        fi
    else
        echo "note: libnccl not installed or not root: NCCL hidden is not checked"
    fi
fi
exit $fail
