#!/bin/bash
# torch_load.sh - a checkpoint is readable by h5py and its /model tensors load into the
# equivalent PyTorch nn.Sequential with load_state_dict(strict=True); PyTorch's forward pass
# then gives the test accuracy that `ddptrain eval` reports for the same checkpoint. The same
# for a residual job, loaded into the Residual module exactly as docs/training.md prints it.
set -u
DDPTRAIN=${DDPTRAIN:?} DDP_SRC=${DDP_SRC:?}
PY=/usr/bin/python3
$PY -c 'import torch, h5py' 2>/dev/null || { echo "python3-torch and python3-h5py needed"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
"$DDPTRAIN" data synth -o d.h5 --shape 1,12,12 --classes 10 --train 2000 --test 500 --seed 8 >/dev/null || exit 1
cat > j.ini <<INI
[job]
output = run
[data]
file = d.h5
batch_size = 50
[model]
layers = conv2d(6, 3, pad=1), batchnorm, relu, maxpool(2), flatten, linear(32), batchnorm, relu, dropout(0.1), linear(10)
[optim]
momentum = 0.9
lr = 0.05
[train]
epochs = 2
INI
"$DDPTRAIN" j.ini > run.log 2>&1 || { cat run.log; exit 1; }
ck=$(ls run/checkpoints/ckpt-*.h5 | sort | tail -1)
want=$("$DDPTRAIN" eval j.ini --checkpoint "$ck" 2>&1 | sed -n 's/.*accuracy \([0-9.]*\).*/\1/p')
$PY - "$ck" "$want" <<'PY'
import sys, h5py, numpy as np, torch, torch.nn as nn
path, want = sys.argv[1], float(sys.argv[2])
net = nn.Sequential(nn.Conv2d(1, 6, 3, padding=1), nn.BatchNorm2d(6), nn.ReLU(), nn.MaxPool2d(2),
                    nn.Flatten(), nn.Linear(6 * 6 * 6, 32), nn.BatchNorm1d(32), nn.ReLU(),
                    nn.Dropout(0.1), nn.Linear(32, 10))
with h5py.File(path, "r") as f:
    sd = {k: torch.from_numpy(np.array(v[()])) if v.shape else torch.tensor(v[()])
          for k, v in f["model"].items()}
    print("checkpoint attributes:", {k: f.attrs[k] for k in ("format", "version", "epoch", "step")})
net.load_state_dict(sd, strict=True)
net.eval()
with h5py.File("d.h5", "r") as d:
    x = torch.from_numpy(d["test/images"][()].astype(np.float32) / 255)
    y = torch.from_numpy(d["test/labels"][()].astype(np.int64))
with torch.no_grad():
    acc = (net(x).argmax(1) == y).float().mean().item()
print(f"PyTorch accuracy of the loaded checkpoint {acc:.4f}, ddptrain eval {want:.4f}")
sys.exit(0 if abs(acc - want) < 1e-3 else 1)
PY
[ $? -eq 0 ] || exit 1

# a residual job: projection and identity shortcuts, a nested block, bias=false, globalavgpool
sed '/^layers = /d; s/^output = run/output = res/' j.ini > r.ini
printf '%s\n' '[model]' 'layers = conv2d(6, 3, pad=1, bias=false), batchnorm, relu,' \
    '  residual(conv2d(12, 3, stride=2, pad=1, bias=false), batchnorm, relu,' \
    '           residual(conv2d(12, 3, pad=1), relu)), globalavgpool, flatten, linear(10)' >> r.ini
"$DDPTRAIN" r.ini > res.log 2>&1 || { cat res.log; exit 1; }
ck=$(ls res/checkpoints/ckpt-*.h5 | sort | tail -1)
want=$("$DDPTRAIN" eval r.ini --checkpoint "$ck" 2>&1 | sed -n 's/.*accuracy \([0-9.]*\).*/\1/p')
$PY - "$ck" "$want" "$DDP_SRC/docs/training.md" <<'PY'
import re, sys, h5py, numpy as np, torch, torch.nn as nn
path, want, doc = sys.argv[1], float(sys.argv[2]), open(sys.argv[3]).read()
code = next(b for b in re.findall(r"```python\n(.*?)```", doc, re.S) if "class Residual" in b)
exec(code)  # the Residual module as documented
net = nn.Sequential(
    nn.Conv2d(1, 6, 3, padding=1, bias=False), nn.BatchNorm2d(6), nn.ReLU(),
    Residual(nn.Sequential(nn.Conv2d(6, 12, 3, stride=2, padding=1, bias=False),
                           nn.BatchNorm2d(12), nn.ReLU(),
                           Residual(nn.Sequential(nn.Conv2d(12, 12, 3, padding=1), nn.ReLU()))),
             nn.Sequential(nn.Conv2d(6, 12, 1, stride=2, bias=False), nn.BatchNorm2d(12))),
    nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(12, 10))
with h5py.File(path, "r") as f:
    sd = {k: torch.from_numpy(np.array(v[()])) if v.shape else torch.tensor(v[()])
          for k, v in f["model"].items()}
net.load_state_dict(sd, strict=True)
net.eval()
with h5py.File("d.h5", "r") as d:
    x = torch.from_numpy(d["test/images"][()].astype(np.float32) / 255)
    y = torch.from_numpy(d["test/labels"][()].astype(np.int64))
with torch.no_grad():
    acc = (net(x).argmax(1) == y).float().mean().item()
print(f"residual job: PyTorch (documented Residual) accuracy {acc:.4f}, ddptrain eval {want:.4f}")
sys.exit(0 if abs(acc - want) < 1e-3 else 1)
PY
