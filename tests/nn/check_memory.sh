#!/bin/bash
# check_memory.sh - `ddptrain check` builds the model as a run does but computes nothing, so it
# must not pay for the activations it never touches: configs/cifar-resnet18.ini at batch 256
# (11 M parameters, about 1.2 GB of activations and gradients on the CPU in the memory plan's
# arena, 4.8 GB without its reuse) must be checked with a peak resident size below that (the
# limit: 1 GiB; the parameters, gradients and optimiser state are 135 MB). The CPU backend's
# blocks come zeroed from calloc, untouched.
set -u
DDPTRAIN=${DDPTRAIN:?set by meson} DDP_SRC=${DDP_SRC:?set by meson}
PY=/usr/bin/python3
# under AddressSanitizer the allocator and its shadow memory are the sanitizer's, not glibc's
if ldd "$DDPTRAIN" 2>/dev/null | grep -q libasan; then
    echo "SKIP: an AddressSanitizer build: its resident size is the sanitizer's"
    exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
$DDPTRAIN data synth -o "$work/c.h5" --shape 3,32,32 --classes 10 --train 512 --test 64 \
    --seed 1 >/dev/null || { echo "FAIL: cannot make the synthetic dataset"; exit 1; }
# the child's peak resident size, from the kernel's accounting of a finished child
$PY - "$DDPTRAIN" "$DDP_SRC/configs/cifar-resnet18.ini" "$work" <<'PYEOF'
import os, resource, subprocess, sys
ddp, job, work = sys.argv[1:4]
# meson's MALLOC_PERTURB_ makes glibc fill every block calloc returns, which a user's run
# never does
env = {k: v for k, v in os.environ.items() if k != "MALLOC_PERTURB_"}
r = subprocess.run([ddp, "check", job, "--set", f"data.file={work}/c.h5",
                    "--set", f"job.output={work}/out", "--set", "train.device=cpu"],
                   capture_output=True, text=True, timeout=120, env=env)
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
if r.returncode != 0:
    print(f"FAIL: check exited {r.returncode}: {r.stderr.strip()[-300:]}")
    sys.exit(1)
limit = 1 << 30
ok = peak < limit
print(f"{'ok  ' if ok else 'FAIL'} check of ResNet-18 at batch 256: peak resident "
      f"{peak / 2**20:.0f} MiB (limit {limit / 2**20:.0f} MiB)")
sys.exit(0 if ok else 1)
PYEOF
