#!/bin/bash
# test_fmnist_h5py.sh DATA_CLI CHECK_PY - `ddptrain data idx --dir` on the real
# Fashion-MNIST, then h5py (Debian's /usr/bin/python3) compares the file with the IDX
# files decoded by numpy. Exit 77 when the dataset or h5py/numpy are not installed.
set -u
CLI=$1
CHECK=$2
DIR=${DDP_FMNIST_DIR:-/usr/share/datasets/fashion-mnist}
PY=/usr/bin/python3
if [ ! -e "$DIR/train-images-idx3-ubyte.gz" ] && [ ! -e "$DIR/train-images-idx3-ubyte" ]; then
    echo "SKIP: Fashion-MNIST not installed in $DIR"
    exit 77
fi
T=$(mktemp -d /tmp/ddp_fmnist_py.XXXXXX)
trap 'rm -rf "$T"' EXIT
"$CLI" data idx --dir "$DIR" -o "$T/fmnist.h5" || { echo "FAIL: import exited $?"; exit 1; }
[ -e "$T/fmnist.h5.tmp" ] && { echo "FAIL: fmnist.h5.tmp left behind"; exit 1; }
"$CLI" data info "$T/fmnist.h5" || { echo "FAIL: info exited $?"; exit 1; }
if ! [ -x "$PY" ] || ! "$PY" -c 'import h5py, numpy' 2>/dev/null; then
    echo "SKIP: $PY with h5py and numpy is not installed (the import itself passed)"
    exit 77
fi
"$PY" "$CHECK" "$T/fmnist.h5" "$DIR"
