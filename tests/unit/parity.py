#!/usr/bin/python3
"""PyTorch parity: ddptrain and PyTorch 1.13 start from the same weights ([model] init),
see the same batches in order (shuffle off, one rank, one thread) and must end with every
parameter and buffer within 1e-4 relative OR 1e-6 absolute of PyTorch's, element by element.

Cases: MLP 50 SGD-momentum steps, CNN 20 SGD-momentum steps, conv+batchnorm (running stats
compared too), MLP SGD nesterov + weight decay, MLP Adam and AdamW (weight decay 0.01).

Environment: DDPTRAIN (binary; default DDP_BUILD/ddptrain or DDP_SRC/build/ddptrain),
DDP_SRC (source root), DDP_DATASET (Fashion-MNIST HDF5; default DDP_SRC/datasets/
fashion-mnist.h5; imported with `ddptrain data idx` into a temporary directory when missing),
DDP_PARITY_CASES (comma-separated case names to run a subset), DDP_PARITY_KEEP=1 (keep the
temporary directory). Exit 0 pass, 1 mismatch or failure, 77 when /usr/bin/python3 cannot import
torch or h5py.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

# One thread everywhere, set before torch loads its pools.
for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS"):
    os.environ[_v] = "1"

try:
    import h5py
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:  # the only reason to skip
    print(f"SKIP: {sys.executable} cannot import torch/h5py/numpy: {e}")
    sys.exit(77)

REL_TOL = 1e-4
ABS_TOL = 1e-6
IDX_DIR = "/usr/share/datasets/fashion-mnist"

MLP = "flatten, linear(512), relu, linear(512), relu, linear(10)"
CNN = ("conv2d(32, 5), relu, maxpool(2), conv2d(64, 5), relu, maxpool(2), "
       "flatten, linear(512), relu, linear(10)")
BN = "conv2d(8, 3, pad=1), batchnorm, relu, maxpool(2), flatten, linear(10)"

# name, layers, batch, steps, optimiser settings
CASES = [
    ("mlp-sgd", MLP, 64, 50, dict(name="sgd", lr=0.05, momentum=0.9)),
    ("cnn-sgd", CNN, 32, 20, dict(name="sgd", lr=0.05, momentum=0.9)),
    ("bn-sgd", BN, 32, 20, dict(name="sgd", lr=0.05, momentum=0.9)),
    ("mlp-sgd-nesterov-wd", MLP, 64, 20,
     dict(name="sgd", lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01)),
    ("mlp-adam", MLP, 64, 10, dict(name="adam", lr=1e-3, weight_decay=0.01)),
    ("mlp-adamw", MLP, 64, 10, dict(name="adamw", lr=1e-3, weight_decay=0.01)),
]


def split_layers(spec):
    """Top-level comma split (commas inside parentheses belong to the layer)."""
    out, depth, cur = [], 0, ""
    for ch in spec:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def build_torch(spec, in_shape):
    """nn.Sequential for a ddptrain [model] layers string; in_shape is (C, H, W)."""
    shape = tuple(in_shape)
    mods = []
    for item in split_layers(spec):
        m = re.fullmatch(r"(\w+)\s*(?:\((.*)\))?", item)
        if not m:
            raise ValueError(f"bad layer {item!r}")
        name, args = m.group(1), m.group(2)
        pos, kw = [], {}
        if args:
            for a in args.split(","):
                a = a.strip()
                if "=" in a:
                    k, v = a.split("=", 1)
                    kw[k.strip()] = v.strip()
                else:
                    pos.append(a)
        if name == "flatten":
            mods.append(nn.Flatten())
            shape = (int(np.prod(shape)),)
        elif name == "linear":
            n = int(pos[0])
            mods.append(nn.Linear(shape[0], n))
            shape = (n,)
        elif name == "relu":
            mods.append(nn.ReLU())
        elif name == "conv2d":
            out, k = int(pos[0]), int(pos[1])
            s, p = int(kw.get("stride", 1)), int(kw.get("pad", 0))
            mods.append(nn.Conv2d(shape[0], out, k, stride=s, padding=p))
            shape = (out, (shape[1] + 2 * p - k) // s + 1, (shape[2] + 2 * p - k) // s + 1)
        elif name in ("maxpool", "avgpool"):
            k = int(pos[0])
            mods.append(nn.MaxPool2d(k) if name == "maxpool" else nn.AvgPool2d(k))
            shape = (shape[0], shape[1] // k, shape[2] // k)
        elif name == "batchnorm":
            mods.append(nn.BatchNorm2d(shape[0]) if len(shape) == 3 else nn.BatchNorm1d(shape[0]))
        elif name == "dropout":
            mods.append(nn.Dropout(float(pos[0])))
        else:
            raise ValueError(f"unknown layer {name!r}")
    return nn.Sequential(*mods)


def save_init(model, path):
    with h5py.File(path, "w") as f:
        g = f.create_group("model")
        for k, v in model.state_dict().items():
            a = v.detach().cpu().numpy()
            if a.dtype == np.int64:
                g.create_dataset(k, data=np.int64(a))  # scalar int64 (num_batches_tracked)
            else:
                g.create_dataset(k, data=a.astype(np.float32))


def make_optim(model, o):
    lr, wd = o["lr"], o.get("weight_decay", 0.0)
    if o["name"] == "sgd":
        return torch.optim.SGD(model.parameters(), lr=lr, momentum=o.get("momentum", 0.0),
                               nesterov=o.get("nesterov", False), weight_decay=wd)
    if o["name"] == "adam":
        return torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.999), eps=1e-8,
                                weight_decay=wd)
    if o["name"] == "adamw":
        return torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.999), eps=1e-8,
                                 weight_decay=wd)
    raise ValueError(o["name"])


def torch_train(model, opt, X, Y, batch, steps):
    model.train()
    losses = []
    for s in range(steps):
        xb = X[s * batch:(s + 1) * batch]
        yb = Y[s * batch:(s + 1) * batch]
        opt.zero_grad()
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def run_ddptrain(ddptrain, tmp, name, layers, data_file, init, batch, steps, o):
    out = os.path.join(tmp, name, "run")
    job = os.path.join(tmp, name, "job.ini")
    with open(job, "w") as f:
        f.write(f"[job]\nname = parity-{name}\nseed = 1\noutput = {out}\n"
                f"[data]\nfile = {data_file}\n"
                f"[model]\nlayers = {layers}\n")
    sets = {
        "model.init": init, "data.shuffle": "false", "data.batch_size": batch,
        "train.max_steps": steps, "train.epochs": 1, "data.test": "", "train.log_every": 1,
        "train.threads": 1, "optim.name": o["name"], "optim.lr": repr(o["lr"]),
        "optim.momentum": o.get("momentum", 0), "optim.nesterov": str(o.get("nesterov", False)).lower(),
        "optim.weight_decay": o.get("weight_decay", 0), "optim.schedule": "constant",
        "optim.lr_scaling": "none", "checkpoint.every_epochs": 0, "checkpoint.resume": "never",
        "dist.backend": "none", "job.output": out,
    }
    cmd = [ddptrain, job]
    for k, v in sets.items():
        cmd += ["--set", f"{k}={v}"]
    env = dict(os.environ)
    for v in ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "SLURM_STEP_ID", "SLURM_PROCID",
              "RANK", "WORLD_SIZE"):
        env.pop(v, None)  # a single process, whatever launched the test
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       env=env, timeout=300)
    if r.returncode != 0:
        print(r.stdout)
        raise RuntimeError(f"ddptrain exited {r.returncode}: {' '.join(cmd)}")
    losses = []
    import json
    with open(os.path.join(out, "metrics.jsonl")) as f:
        for line in f:
            rec = json.loads(line)
            if rec.get("kind") == "train":
                losses.append(rec["loss"])
    with h5py.File(os.path.join(out, "model.h5"), "r") as f:
        weights = {k: f["model"][k][()] for k in f["model"].keys()}
    return weights, losses


def compare(ours, ref):
    """Per tensor: max |a-b|, max relative error among elements outside the absolute tolerance,
    count of elements failing both tolerances."""
    rows, ok = [], True
    for k, v in ref.items():
        b = v.detach().cpu().numpy()
        if k not in ours:
            rows.append((k, None, None, -1))
            ok = False
            continue
        a = np.asarray(ours[k])
        if a.shape != b.shape:
            rows.append((k, None, None, -2))
            ok = False
            continue
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        d = np.abs(a64 - b64)
        outside = d > ABS_TOL
        rel = np.where(outside, d / np.maximum(np.abs(b64), 1e-30), 0.0)
        bad = int(np.count_nonzero(outside & (d > REL_TOL * np.abs(b64))))
        rows.append((k, float(d.max()) if d.size else 0.0, float(rel.max()) if rel.size else 0.0, bad))
        ok = ok and bad == 0
    extra = sorted(set(ours) - set(ref))
    for k in extra:
        rows.append((k, None, None, -3))
        ok = False
    return ok, rows


def find_ddptrain():
    p = os.environ.get("DDPTRAIN")
    if p:
        return p
    for d in (os.environ.get("DDP_BUILD"), os.path.join(os.environ.get("DDP_SRC", "."), "build")):
        if d and os.access(os.path.join(d, "ddptrain"), os.X_OK):
            return os.path.join(d, "ddptrain")
    return shutil.which("ddptrain") or "ddptrain"


def get_dataset(ddptrain, tmp):
    src = os.environ.get("DDP_SRC", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    path = os.environ.get("DDP_DATASET") or os.path.join(src, "datasets", "fashion-mnist.h5")
    if os.path.exists(path):
        return path, "fashion-mnist"
    path = os.path.join(tmp, "fashion-mnist.h5")
    if os.path.isdir(IDX_DIR):
        cmd = [ddptrain, "data", "idx", "--dir", IDX_DIR, "-o", path]
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if r.returncode != 0:
            print(r.stdout)
            raise RuntimeError(f"import failed ({r.returncode}): {' '.join(cmd)}")
        return path, "fashion-mnist (imported)"
    # No Fashion-MNIST anywhere: synthetic data of the same shape still tests parity.
    path = os.path.join(tmp, "synth.h5")
    cmd = [ddptrain, "data", "synth", "-o", path, "--shape", "1,28,28", "--classes", "10",
           "--train", "2000", "--test", "100"]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        print(r.stdout)
        raise RuntimeError(f"no Fashion-MNIST ({IDX_DIR} missing) and synth failed: {' '.join(cmd)}")
    print(f"NOTE: {IDX_DIR} not found; using synthetic data")
    return path, "synthetic"


def load_split(path, n):
    with h5py.File(path, "r") as f:
        imgs = f["train/images"][:n]
        labels = f["train/labels"][:n]
    if imgs.dtype == np.uint8:
        X = torch.from_numpy(imgs.astype(np.float32)) / 255.0  # float32 v / 255.0f, as ddptrain
    else:
        X = torch.from_numpy(imgs.astype(np.float32))
    return X, torch.from_numpy(labels.astype(np.int64))


def main():
    torch.set_num_threads(1)
    ddptrain = find_ddptrain()
    keep = os.environ.get("DDP_PARITY_KEEP") == "1"
    only = [c for c in os.environ.get("DDP_PARITY_CASES", "").split(",") if c]
    tmp = tempfile.mkdtemp(prefix="ddp-parity-")
    all_ok = True
    try:
        data_file, data_desc = get_dataset(ddptrain, tmp)
        need = max(b * s for _, _, b, s, _ in CASES)
        X, Y = load_split(data_file, need)
        print(f"ddptrain {ddptrain}; torch {torch.__version__}; data {data_file} ({data_desc}); "
              f"tolerance per element: rel {REL_TOL:g} or abs {ABS_TOL:g}")
        summary = []
        for ci, (name, layers, batch, steps, o) in enumerate(CASES):
            if only and name not in only:
                continue
            os.makedirs(os.path.join(tmp, name))
            torch.manual_seed(1000 + ci)
            model = build_torch(layers, X.shape[1:])
            init = os.path.join(tmp, name, "init.h5")
            save_init(model, init)
            try:
                ours, our_losses = run_ddptrain(ddptrain, tmp, name, layers, data_file, init,
                                                batch, steps, o)
            except Exception as e:  # noqa: BLE001 - report and continue with other cases
                print(f"\n[{name}] FAIL: {e}")
                summary.append((name, steps, None, None, None, None, False))
                all_ok = False
                continue
            ref_losses = torch_train(model, make_optim(model, o), X, Y, batch, steps)
            ok, rows = compare(ours, model.state_dict())
            loss_diff = (max(abs(a - b) for a, b in zip(our_losses, ref_losses))
                         if len(our_losses) == len(ref_losses) else float("nan"))
            opt_desc = ", ".join(f"{k}={v}" for k, v in o.items())
            print(f"\n[{name}] {layers} | batch {batch}, {steps} steps, {opt_desc}")
            print(f"  {'tensor':<24} {'max abs err':>12} {'max rel err*':>12} {'bad':>6}")
            for k, d, r, bad in rows:
                if bad < 0:
                    why = {-1: "missing in ddptrain output", -2: "shape differs",
                           -3: "not in torch state_dict"}[bad]
                    print(f"  {k:<24} {why}")
                else:
                    print(f"  {k:<24} {d:12.3e} {r:12.3e} {bad:6d}")
            print(f"  loss step 1..{steps}: ddptrain {our_losses[0]:.6f}..{our_losses[-1]:.6f} "
                  f"torch {ref_losses[0]:.6f}..{ref_losses[-1]:.6f} max |diff| {loss_diff:.2e}")
            maxd = max((d for _, d, _, b in rows if b >= 0), default=float("nan"))
            maxr = max((r for _, _, r, b in rows if b >= 0), default=float("nan"))
            nbad = sum(b for _, _, _, b in rows if b > 0)
            summary.append((name, steps, maxd, maxr, nbad, loss_diff, ok))
            all_ok = all_ok and ok
        print("\n* relative error over elements outside the 1e-6 absolute tolerance\n")
        print(f"{'case':<22} {'steps':>5} {'max abs err':>12} {'max rel err*':>12} "
              f"{'bad elems':>9} {'loss diff':>10}  result")
        for name, steps, d, r, nbad, ld, ok in summary:
            if d is None:
                print(f"{name:<22} {steps:5d} {'-':>12} {'-':>12} {'-':>9} {'-':>10}  FAIL")
            else:
                print(f"{name:<22} {steps:5d} {d:12.3e} {r:12.3e} {nbad:9d} {ld:10.2e}  "
                      f"{'ok' if ok else 'FAIL'}")
    finally:
        if keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
