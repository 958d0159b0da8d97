# lib.sh - shared by the scripts of tests/gpu (sourced, not run).
#
# gpu_available: 0 when gpu_probe finds a usable GPU; 77 when not (no CUDA in the build, no
#   driver, no device); a missing GPU is a failure (1) when DDP_GPU_REQUIRE=1, as on the
#   device machine, where a skip would hide a broken setup.
# gpu_select JOB.ini [--set ...]: sets the arrays CPU_ARGS and GPU_ARGS, the --set options that run JOB on
#   the CPU backend and on the CUDA backend of this rank's GPU. With a [train] device key
#   (cpu | cuda | auto) both name it; without one, the GPU run asks for dist.backend = nccl
#   (NCCL implies the CUDA backend) and the CPU run for dist.backend = none.
#   gpu_check_log LOG then fails when the GPU run's log does not say it ran on CUDA and NCCL.

gpu_available() {
    local probe=${GPU_PROBE:-${DDP_BUILD:?}/tests/gpu/gpu_probe} rc
    "$probe"
    rc=$?
    if [ $rc = 0 ]; then return 0; fi
    if [ "${DDP_GPU_REQUIRE:-0}" = 1 ]; then
        echo "FAIL: no usable GPU, but DDP_GPU_REQUIRE=1 (probe exit $rc)"
        return 1
    fi
    [ $rc = 77 ] && return 77
    return 1
}

gpu_select() {
    local job=$1 err
    shift
    err=$(mktemp)
    if "${DDPTRAIN:?}" "$job" "$@" --set train.device=cpu --set train.max_steps=1 \
            --set job.output="$(dirname "$err")/gpu-select.$$" >/dev/null 2>"$err"; then
        CPU_ARGS=(--set train.device=cpu --set dist.backend=none)
        GPU_ARGS=(--set train.device=cuda --set dist.backend=nccl)
        GPU_SELECT="[train] device"
    elif grep -qi "device" "$err"; then
        CPU_ARGS=(--set dist.backend=none)
        GPU_ARGS=(--set dist.backend=nccl)
        GPU_SELECT="[dist] backend (no [train] device key)"
    else
        echo "FAIL: probing for [train] device: $(cat "$err")"
        rm -rf "$err" "$(dirname "$err")/gpu-select.$$"
        return 1
    fi
    rm -rf "$err" "$(dirname "$err")/gpu-select.$$"
    return 0
}

gpu_check_log() {
    local log=$1
    if ! grep -qi "cuda" "$log" || ! grep -qi "nccl" "$log"; then
        echo "FAIL: the GPU run's log does not mention cuda and nccl: did it run on the CPU?"
        sed -n 1,5p "$log"
        return 1
    fi
    return 0
}
