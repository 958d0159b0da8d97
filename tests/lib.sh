# lib.sh - setup shared by test scripts (sourced, not run; DDPTRAIN set):
#   need_h5py           exit 1 unless /usr/bin/python3 has h5py and numpy
#   enter_workdir       cd into a new folder $work, removed when the script exits
#   mpirun_as_root      let OpenMPI's mpirun run as root and oversubscribe the cores
#   synth_small FILE [OPTION...]  `ddptrain data synth`: 1x8x8, 10 classes, 2003 training
#                       samples (not divisible by 2, 3 or 4; 30 steps of 48 stay in the first
#                       epoch), 101 test, seed 5; OPTIONs added (--dtype float32)
#   mlp_job FILE        a job of an MLP on d.h5: seed 77, SGD, 1 epoch of at most 30 steps

need_h5py() {
    /usr/bin/python3 -c 'import h5py, numpy' 2>/dev/null || { echo "python3-h5py needed"; exit 1; }
}

enter_workdir() {
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    cd "$work" || exit 1
}

mpirun_as_root() {
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    export OMPI_MCA_rmaps_base_oversubscribe=1
}

synth_small() {
    local file=$1
    shift
    "${DDPTRAIN:?}" data synth -o "$file" --shape 1,8,8 --classes 10 --train 2003 --test 101 \
        --seed 5 "$@" >/dev/null || exit 1
}

mlp_job() {
    cat > "$1" <<INI
[job]
seed = 77
[data]
file = d.h5
test =
[model]
layers = flatten, linear(32), relu, linear(16), relu, linear(10)
[optim]
name = sgd
lr = 0.05
momentum = 0.9
weight_decay = 0.0001
[train]
epochs = 1
max_steps = 30
log_every = 10
INI
}
