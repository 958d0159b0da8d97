#!/bin/bash
# pack.sh [BUILD_DIR] [OUT_DIR] - the folder that tests/gpu/device-check.sh needs on the device
# machine, which has no HDF5, OpenBLAS, inih or MPI libraries: the GPU build's binaries
# (ddptrain and the gpu tests) in OUT_DIR/bin and every shared library they load in
# OUT_DIR/lib, except the C library family, libstdc++/libgcc_s (the device's are at least as
# new), the CUDA driver, and cuBLAS/cuBLASLt/NCCL (hundreds of MB: the device's CUDA toolkit
# and PyTorch's pip packages provide them; device-check.sh finds them there), packed as
# OUT_DIR/bundle.tar.xz (OpenBLAS alone is 35 MiB unpacked; the bundle is about 13 MiB), and
# the real Fashion-MNIST's IDX files (30 MiB) in OUT_DIR/fashion-mnist for the fullrun stage.
# Defaults: build-cuda, .dev/gpu (git ignores .dev/). Fails when the bundle exceeds 60 MiB (a
# device call carries at most 64 MiB). Then, with the device tool:
#     command: bash tests/gpu/device-check.sh .dev/gpu     carry: [".dev/gpu"]
set -eu
build=${1:-build-cuda}
out=${2:-.dev/gpu}
bins="ddptrain tests/gpu/test_cuda_ops tests/gpu/test_nccl tests/gpu/gpu_probe
    tests/gpu/test_cuda_layout tests/gpu/test_cuda_nhwc_conv tests/gpu/test_cuda_act16_elem
    tests/gpu/test_cuda_act16_norm tests/gpu/test_cuda_act16_conv tests/gpu/test_cuda_pool_bias
    tests/gpu/test_cuda_conv_graph"
for b in $bins; do
    [ -x "$build/$b" ] || { echo "pack.sh: $build/$b missing: ninja -C $build first" >&2; exit 1; }
done
rm -rf "$out"
mkdir -p "$out"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
for b in $bins; do cp "$build/$b" "$stage/bin/"; done
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libmvec|libpthread|libdl\.so|librt\.so|libresolv|libutil|libcuda\.so|libcublas|libcublasLt|libnccl|libstdc\+\+|libgcc_s)'
for b in $bins; do ldd "$build/$b"; done |
    awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' | sort -u |
    while read -r name path; do
        echo "$name" | grep -Eq "$skip" && continue
        cp -L "$path" "$stage/lib/$name"
    done
git rev-parse --short HEAD > "$stage/REVISION" 2>/dev/null || echo unknown > "$stage/REVISION"
git status --porcelain --untracked-files=no 2>/dev/null | grep -q . && echo "+ local changes" >> "$stage/REVISION"
echo "pack.sh: $(du -sk "$stage" | cut -f1) KiB unpacked: $(ls "$stage/lib" | wc -l) libraries"
tar -C "$stage" -cf - . | xz -T0 -6 > "$out/bundle.tar.xz"
# the real Fashion-MNIST (Debian's dataset-fashion-mnist, gzip IDX files) for the fullrun stage
fm=/usr/share/datasets/fashion-mnist
if ls "$fm"/*-ubyte.gz > /dev/null 2>&1; then
    mkdir -p "$out/fashion-mnist"
    cp "$fm"/*-ubyte.gz "$out/fashion-mnist/"
else
    echo "pack.sh: no Fashion-MNIST in $fm (apt-get install dataset-fashion-mnist): no fullrun" >&2
fi
kib=$(du -sk "$out" | cut -f1)
echo "pack.sh: $out/bundle.tar.xz is $((kib / 1024)) MiB"
if [ "$kib" -gt $((60 * 1024)) ]; then
    echo "pack.sh: more than 60 MiB: the device call carries at most 64 MiB" >&2
    exit 1
fi
