# packages.sh - the Debian 12 packages ddptrain needs, and a function that installs the missing
# ones. Sourced by tools/quickstart and tools/test.

# to build and train (g++: the GPU twin, build/ddptrain-twin and suite twin; libpng-dev and
# libjpeg62-turbo-dev: `ddptrain data imagefolder`, optional)
DDP_PKGS_BUILD="gcc g++ pkg-config meson ninja-build libhdf5-dev libopenblas-dev libinih-dev
zlib1g-dev libpng-dev libjpeg62-turbo-dev libopenmpi-dev openmpi-bin libpmi2-0-dev
dataset-fashion-mnist"
# to run every test suite: a real Slurm, PyTorch for parity, h5py for layout checks, PMIx headers
# (slurm case 08 builds a PMIx program); mandoc, groff and Lmod check the installed prefix
# (unit test install)
DDP_PKGS_TEST="slurm-wlm slurmctld slurmd slurm-client munge iproute2 util-linux procps
python3-torch python3-h5py python3-numpy python3-pil hdf5-tools valgrind python3-venv clang-format
libpmix-dev mandoc groff-base lmod"

# ddp_install_missing PKG... : apt-get install what dpkg does not have (root only).
ddp_install_missing() {
    local missing=() p
    for p in "$@"; do
        dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "$(id -u)" -ne 0 ]; then
        echo "ddptrain: missing Debian packages: ${missing[*]}" >&2
        echo "ddptrain: run as root, or: sudo apt-get install ${missing[*]}" >&2
        return 1
    fi
    echo "installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}
