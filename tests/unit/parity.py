#!/usr/bin/python3
"""PyTorch parity: ddptrain takes the steps PyTorch 1.13 takes from the same weights and batches
(lr per step, the first E2E_STEPS steps end to end, every step from ddptrain's checkpointed state,
model.h5's names and shapes), within tolerances measured from float32 noise (docs/testing.md).
Environment: DDPTRAIN, DDP_SRC, DDP_DATASET, DDP_PARITY_CASES (a subset), DDP_PARITY_KEEP=1,
DDP_PARITY_VERBOSE=1. Exit 0 pass, 1 mismatch, 77 without torch or h5py in /usr/bin/python3.
"""
import collections
import copy
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

# One thread everywhere, set before torch loads its pools (not when bench/torch_train.py imports
# build_torch from here).
if __name__ == "__main__":
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

EPS32 = float(np.finfo(np.float32).eps)
E2E_STEPS = 3     # steps compared end to end from the common start
K_NOISE = 16      # x the measured float32 noise of a tensor (another summation order's share)
R_FLOOR = 1e-4    # x the tensor's largest update: float32 hyper-parameters (1 - 0.999f
                  # is 1.3e-5 off 0.001: Adam's second moment), and noise measured as ~0
ULPS = 4          # x eps32 x |value|: the rounding of the stored float32 result
K_TIE = 16        # a branch is a tie within K_TIE x the float32 noise of its layer's input
MAX_TIES = 64     # flips replayed per span at most (the nearest ones)
LR_REL = 1e-6     # logged lr against torch's scheduler
IDX_DIR = "/usr/share/datasets/fashion-mnist"

MLP = "flatten, linear(512), relu, linear(512), relu, linear(10)"
CNN = ("conv2d(32, 5), relu, maxpool(2), conv2d(64, 5), relu, maxpool(2), "
       "flatten, linear(512), relu, linear(10)")
# No bias right before a batchnorm (as in ResNets): its gradient is zero up to rounding, so its
# update is float32 noise alone, whose size depends on how each program sums, not on anything
# measured here.
BN = "conv2d(8, 3, pad=1, bias=false), batchnorm, relu, maxpool(2), flatten, linear(10)"
MLP_BN = "flatten, linear(64, bias=false), batchnorm, relu, linear(10)"
# identity and projection shortcuts, nesting, bias=false, globalavgpool
RESNET = ("conv2d(8, 3, pad=1, bias=false), batchnorm, relu, "
          "residual(conv2d(8, 3, pad=1, bias=false), batchnorm, relu, "
          "conv2d(8, 3, pad=1, bias=false), batchnorm), relu, "
          "residual(conv2d(16, 3, stride=2, pad=1, bias=false), batchnorm, relu, "
          "residual(conv2d(16, 3, pad=1), relu)), relu, "
          "globalavgpool, flatten, linear(10, bias=false)")
# residual blocks as the first layers: their shortcut is the model's input (x + body(x))
RESINPUT = ("residual(conv2d(1, 3, pad=1), relu), residual(batchnorm, relu), "
            "conv2d(8, 3, stride=2), relu, flatten, linear(10)")

# A case trains `epochs` epochs over a split of batch x micros samples (shuffle off, so every
# epoch sees the same batches in order); recipe keys go to ddptrain with --set and to the
# PyTorch step in torch_step. Adam/AdamW at torch's default eps 1e-8 are the hardest: their
# first steps are nearly lr * sign(g), so an element whose gradient is a near-cancelling sum
# moves by a float32-noise-dependent fraction of lr (the measured noise covers it, as PyTorch
# float32 shows the same).
Case = collections.namedtuple("Case", "name layers batch micros epochs optim seed recipe")
SGD9 = dict(name="sgd", lr=0.05, momentum=0.9)
SGD1 = dict(name="sgd", lr=0.01, momentum=0.9)
ADAM = dict(name="adam", lr=1e-3, weight_decay=0.01, eps=1e-4)
ADAMW = dict(name="adamw", lr=1e-3, weight_decay=0.01, eps=1e-4)
CASES = [
    Case("mlp-sgd", MLP, 64, 30, 1, SGD9, 1, {}),
    Case("cnn-sgd", CNN, 32, 20, 1, SGD9, 3, {}),
    Case("bn-sgd", BN, 32, 20, 1, SGD1, 4, {}),
    Case("resnet-sgd", RESNET, 32, 20, 1, SGD1, 7, {}),
    Case("residual-input-sgd", RESINPUT, 32, 10, 1, SGD1, 8, {}),
    Case("mlp-bn-batch4", MLP_BN, 4, 12, 1, SGD1, 8, {}),
    Case("mlp-sgd-nesterov-wd", MLP, 64, 20, 1, dict(SGD9, nesterov=True, weight_decay=0.01), 4,
         {}),
    Case("mlp-adam-e4", MLP, 64, 10, 1, ADAM, 5, {}),
    Case("mlp-adamw-e4", MLP, 64, 10, 1, ADAMW, 6, {}),
    Case("mlp-adam-e8", MLP, 64, 10, 1, dict(ADAM, eps=1e-8), 5, {}),
    Case("mlp-adamw-e8", MLP, 64, 10, 1, dict(ADAMW, eps=1e-8), 6, {}),
    Case("mlp-clip", MLP, 64, 10, 2, SGD9, 11, dict(clip=0.5)),
    Case("mlp-accumulate", MLP, 32, 10, 2, SGD9, 12, dict(accumulate=3)),
    Case("mlp-label-smoothing", MLP, 64, 10, 2, SGD9, 13, dict(smoothing=0.1)),
    Case("mlp-multistep", MLP, 64, 4, 5, SGD9, 14, dict(milestones=[1, 3], gamma=0.5)),
    Case("mlp-onecycle", MLP, 64, 6, 3, SGD9, 15, dict(onecycle=True)),
    Case("mlp-adam-onecycle-clip-acc", MLP, 32, 6, 2, ADAM, 16,
         dict(onecycle=True, clip=1.0, accumulate=2, smoothing=0.05)),
    Case("resnet-clip-acc-smoothing", RESNET, 16, 6, 2, SGD1, 17,
         dict(clip=1.0, accumulate=2, smoothing=0.1)),
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


class Residual(nn.Module):
    """ddptrain's residual(...): body(x) + shortcut(x), the shortcut a 1x1 convolution without
    bias (stride: the body's) and a batchnorm when the body changes the shape, else the
    identity. The class docs/job-file.md documents."""

    def __init__(self, body, shortcut=None):
        super().__init__()
        self.body = body
        if shortcut is not None:
            self.shortcut = shortcut

    def forward(self, x):
        return self.body(x) + (self.shortcut(x) if hasattr(self, "shortcut") else x)


def build_torch(spec, in_shape):
    """nn.Sequential for a ddptrain [model] layers string; in_shape is (C, H, W)."""
    seq, _, _ = build_seq(spec, tuple(in_shape))
    return seq


def build_seq(spec, shape):
    """(nn.Sequential, output shape, product of strides) of a layer list from input shape."""
    mods, stride = [], 1
    for item in split_layers(spec):
        m = re.fullmatch(r"(\w+)\s*(?:\((.*)\))?", item, re.S)
        if not m:
            raise ValueError(f"bad layer {item!r}")
        name, args = m.group(1), m.group(2)
        if name == "residual":
            body, out, s = build_seq(args, shape)
            short = None
            if out != shape:
                short = nn.Sequential(nn.Conv2d(shape[0], out[0], 1, stride=s, bias=False),
                                      nn.BatchNorm2d(out[0]))
            mods.append(Residual(body, short))
            shape, stride = out, stride * s
            continue
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
            mods.append(nn.Linear(shape[0], n, bias=kw.get("bias", "true") != "false"))
            shape = (n,)
        elif name == "relu":
            mods.append(nn.ReLU())
        elif name == "conv2d":
            out, k = int(pos[0]), int(pos[1])
            s, p = int(kw.get("stride", 1)), int(kw.get("pad", 0))
            mods.append(nn.Conv2d(shape[0], out, k, stride=s, padding=p,
                                  bias=kw.get("bias", "true") != "false"))
            shape = (out, (shape[1] + 2 * p - k) // s + 1, (shape[2] + 2 * p - k) // s + 1)
            stride *= s
        elif name in ("maxpool", "avgpool"):
            k = int(pos[0])
            mods.append(nn.MaxPool2d(k) if name == "maxpool" else nn.AvgPool2d(k))
            shape = (shape[0], shape[1] // k, shape[2] // k)
            stride *= k
        elif name == "globalavgpool":
            mods.append(nn.AdaptiveAvgPool2d(1))
            stride *= max(shape[1], shape[2])
            shape = (shape[0], 1, 1)
        elif name == "batchnorm":
            mods.append(nn.BatchNorm2d(shape[0]) if len(shape) == 3 else nn.BatchNorm1d(shape[0]))
        elif name == "dropout":
            mods.append(nn.Dropout(float(pos[0])))
        else:
            raise ValueError(f"unknown layer {name!r}")
    return nn.Sequential(*mods), shape, stride


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
    cls = torch.optim.Adam if o["name"] == "adam" else torch.optim.AdamW
    return cls(model.parameters(), lr=lr, betas=(0.9, 0.999), eps=o.get("eps", 1e-8),
               weight_decay=wd)


def steps_per_epoch(case):
    k = case.recipe.get("accumulate", 1)
    return (case.micros + k - 1) // k


def micro_batches(case, k):
    """The micro-batch indices of global step k (1-based): K per step, the epoch's last step
    the rest."""
    spe, K = steps_per_epoch(case), case.recipe.get("accumulate", 1)
    g = (k - 1) % spe
    return range(g * K, min((g + 1) * K, case.micros))


def schedule(case):
    """(lr, momentum or beta1) of every step from torch's own schedulers, stepped as a training
    script steps them (MultiStepLR per epoch, OneCycleLR per step), on a stand-in parameter."""
    o, rc = case.optim, case.recipe
    opt = make_optim(nn.Linear(1, 1), o)
    spe = steps_per_epoch(case)
    sched = None
    if "milestones" in rc:
        sched = torch.optim.lr_scheduler.MultiStepLR(opt, rc["milestones"], gamma=rc["gamma"])
    elif rc.get("onecycle"):
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=o["lr"],
                                                    total_steps=case.epochs * spe)
    out = []
    for _ in range(case.epochs):
        for _ in range(spe):
            g = opt.param_groups[0]
            out.append((g["lr"], g["momentum"] if o["name"] == "sgd" else g["betas"][0]))
            opt.step()  # no gradients: nothing moves, but the scheduler sees a step
            if rc.get("onecycle"):
                sched.step()
        if "milestones" in rc:
            sched.step()
    return out


class Branches:
    """The branch decisions of the ReLUs and max-pools of one replay, in call order: taken from
    the values, or imposed (forced, a list as `taken` holds it), with the values seen and the
    gradient that came back to each output kept for the tie search."""

    def __init__(self, forced=None):
        self.forced, self.taken, self.seen, self.grads = forced, [], [], {}

    def take(self, natural, values):
        d = natural() if self.forced is None else self.forced[len(self.taken)]
        self.taken.append(d)
        self.seen.append(values.detach())
        return d

    def watch(self, out):
        """Keep the gradient of the last call's output."""
        if out.requires_grad:
            i = len(self.taken) - 1
            out.register_hook(lambda g: self.grads.__setitem__(i, g.detach()))
        return out


class BranchReLU(nn.Module):
    """ReLU as x * mask, the mask from the Branches in self.ctl (so a decision can be flipped)."""

    def forward(self, x):
        return self.ctl.watch(x * self.ctl.take(lambda: x > 0, x).to(x.dtype))


def pool_windows(x, k):
    """(N, C, H, W) -> (N, C, H/k, W/k, k*k): max-pool's windows (floor mode)."""
    n, c, h, w = x.shape
    oh, ow = h // k, w // k
    x = x[:, :, :oh * k, :ow * k].reshape(n, c, oh, k, ow, k)
    return x.permute(0, 1, 2, 4, 3, 5).reshape(n, c, oh, ow, k * k)


class BranchMaxPool(nn.Module):
    """MaxPool2d(k) as a gather of the window element the Branches in self.ctl chose."""

    def __init__(self, k):
        super().__init__()
        self.k = k

    def forward(self, x):
        w = pool_windows(x, self.k)
        idx = self.ctl.take(lambda: w.argmax(-1), w)
        return self.ctl.watch(w.gather(-1, idx.unsqueeze(-1)).squeeze(-1))


def replay_model(layers, in_shape, dtype):
    """build_torch's model with its ReLUs and max-pools replaced by the Branch modules (the
    state_dict's names stay)."""
    def swap(mod):
        for name, ch in list(mod.named_children()):
            if isinstance(ch, nn.ReLU):
                setattr(mod, name, BranchReLU())
            elif isinstance(ch, nn.MaxPool2d):
                k = ch.kernel_size if isinstance(ch.kernel_size, int) else ch.kernel_size[0]
                setattr(mod, name, BranchMaxPool(k))
            else:
                swap(ch)
    m = build_torch(layers, in_shape)
    swap(m)
    return m.to(dtype)


def flat_layout(model):
    """ddptrain's flat parameter order (its checkpoints' /optim/state1): layers last to first
    (a residual block's body, then its shortcut, in registration order), in each its weight
    then its bias. [(parameter, name, offset, count)], total."""
    groups = {}
    for k, p in model.named_parameters():  # registration order, modules grouped
        groups.setdefault(k.rsplit(".", 1)[0], []).append((k, p))
    out, off = [], 0
    for idx in reversed(list(groups)):
        for k, p in groups[idx]:
            out.append((p, k, off, p.numel()))
            off += p.numel()
    return out, off


# State: name -> numpy array (float64 for floats): the state_dict's entries, "state1:<param>"
# and "state2:<param>" (momentum buffer or Adam's moments, as ddptrain's /optim/state1,2), and
# "t" (optimiser steps taken).
SLOTS = {"sgd": ("momentum_buffer", None), "adam": ("exp_avg", "exp_avg_sq"),
         "adamw": ("exp_avg", "exp_avg_sq")}


def load_state(model, opt, layout, st, oname):
    """Put state st into model and into opt's per-parameter state."""
    sd = model.state_dict()
    model.load_state_dict({k: torch.as_tensor(np.asarray(st[k])).to(sd[k].dtype) for k in sd})
    if st["t"] == 0:
        return
    for p, name, _, _ in layout:
        s = {}
        for slot, key in zip(("state1", "state2"), SLOTS[oname]):
            if key and f"{slot}:{name}" in st:
                s[key] = torch.from_numpy(st[f"{slot}:{name}"]).to(p.dtype).view_as(p).clone()
        if oname != "sgd":
            s["step"] = torch.tensor(float(st["t"]))
        if s:
            opt.state[p] = s


def save_state(model, opt, layout, oname, t):
    """The state of model and opt, as load_state takes it."""
    st = {k: v.detach().double().numpy().copy() if v.is_floating_point() else v.numpy().copy()
          for k, v in model.state_dict().items()}
    for p, name, _, _ in layout:
        for slot, key in zip(("state1", "state2"), SLOTS[oname]):
            if key and key in opt.state.get(p, {}):
                st[f"{slot}:{name}"] = opt.state[p][key].detach().double().numpy().ravel().copy()
    st["t"] = np.int64(t)
    return st


def torch_step(model, opt, case, X, Y, k, lr, mom):
    """Global step k (1-based) of the case, in PyTorch: its micro-batches, each loss / K, one
    backward each; clip_grad_norm_; the optimiser at this step's lr and momentum (or beta1).
    Returns the mean micro-batch loss."""
    rc = case.recipe
    for g in opt.param_groups:
        g["lr"] = lr
        if case.optim["name"] == "sgd":
            g["momentum"] = mom
        else:
            g["betas"] = (mom, g["betas"][1])
    opt.zero_grad()
    js = micro_batches(case, k)
    total = 0.0
    for j in js:
        xb, yb = X[j * case.batch:(j + 1) * case.batch], Y[j * case.batch:(j + 1) * case.batch]
        loss = F.cross_entropy(model(xb), yb, label_smoothing=rc.get("smoothing", 0.0))
        (loss / rc.get("accumulate", 1)).backward()
        total += loss.item()
    if "clip" in rc:
        torch.nn.utils.clip_grad_norm_(model.parameters(), rc["clip"])
    opt.step()
    return total / len(js)


def replay(model, case, sched, X, Y, start, k0, k1, ctl):
    """Steps k0+1..k1 from state start in model's dtype (X of that dtype), the branches by ctl.
    Returns (state, per-step losses)."""
    for m in model.modules():
        if isinstance(m, (BranchReLU, BranchMaxPool)):
            m.ctl = ctl
    layout, _ = flat_layout(model)
    opt = make_optim(model, case.optim)
    load_state(model, opt, layout, start, case.optim["name"])
    model.train()
    losses = [torch_step(model, opt, case, X, Y, k, *sched[k - 1]) for k in range(k0 + 1, k1 + 1)]
    return save_state(model, opt, layout, case.optim["name"], start["t"] + k1 - k0), losses


def wrap_layers(layers):
    """The layers as INI continuation lines (a job file's lines are short): break after commas."""
    lines, cur = [], ""
    for part in layers.split(","):
        if cur and len(cur) + len(part) > 150:
            lines.append(cur)
            cur = part.lstrip()
        else:
            cur = f"{cur},{part}" if cur else part
    lines.append(cur)
    return ",\n    ".join(lines)


def run_ddptrain(ddptrain, tmp, case, data_file, init, steps):
    """Train the case with ddptrain, a checkpoint after every step. Returns dict(final=model.h5's
    tensors, losses, lrs (per step, from metrics.jsonl), ckpt=checkpoint directory)."""
    o, rc = case.optim, case.recipe
    out = os.path.join(tmp, case.name, "run")
    job = os.path.join(tmp, case.name, "job.ini")
    with open(job, "w") as f:
        f.write(f"[job]\nname = parity-{case.name}\nseed = 1\noutput = {out}\n"
                f"[data]\nfile = {data_file}\n"
                f"[model]\nlayers = {wrap_layers(case.layers)}\n")
    sets = {
        "model.init": init, "data.shuffle": "false", "data.batch_size": case.batch,
        "train.epochs": case.epochs, "train.max_steps": 0, "data.test": "",
        "train.log_every": 1, "train.threads": 1, "optim.name": o["name"],
        "optim.lr": repr(o["lr"]), "optim.weight_decay": o.get("weight_decay", 0),
        "optim.schedule": "constant", "optim.lr_scaling": "none", "checkpoint.every_epochs": 0,
        "checkpoint.every_steps": 1, "checkpoint.keep": steps + 1, "checkpoint.resume": "never",
        "dist.backend": "none", "job.output": out,
    }
    if "eps" in o:
        sets["optim.eps"] = repr(o["eps"])
    if o["name"] == "sgd":
        sets["optim.momentum"] = o.get("momentum", 0)
        sets["optim.nesterov"] = str(o.get("nesterov", False)).lower()
    if "clip" in rc:
        sets["optim.clip_grad_norm"] = rc["clip"]
    if "accumulate" in rc:
        sets["train.accumulate"] = rc["accumulate"]
    if "smoothing" in rc:
        sets["train.label_smoothing"] = rc["smoothing"]
    if "milestones" in rc:
        sets.update({"optim.schedule": "multistep", "optim.gamma": rc["gamma"],
                     "optim.milestones": ", ".join(str(m) for m in rc["milestones"])})
    if rc.get("onecycle"):
        sets["optim.schedule"] = "onecycle"
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
    losses, lrs = [], []
    with open(os.path.join(out, "metrics.jsonl")) as f:
        for line in f:
            rec = json.loads(line)
            if rec.get("kind") == "train":
                losses.append(rec["loss"])
                lrs.append(rec["lr"])
    with h5py.File(os.path.join(out, "model.h5"), "r") as f:
        final = {k: f["model"][k][()] for k in f["model"].keys()}
    return dict(final=final, losses=losses, lrs=lrs, ckpt=os.path.join(out, "checkpoints"))


def read_state(path, layout, total):
    """A ddptrain checkpoint (or the init weights: no optimiser state, t = 0) as a state."""
    with h5py.File(path, "r") as f:
        st = {k: f["model"][k][()] for k in f["model"].keys()}
        st = {k: v.astype(np.float64) if v.dtype.kind == "f" else v for k, v in st.items()}
        st["t"] = np.int64(f.attrs["optim_t"] if "optim_t" in f.attrs else 0)
        for slot in ("state1", "state2"):
            if f"optim/{slot}" not in f:
                continue
            flat = f[f"optim/{slot}"][()].astype(np.float64)
            if flat.size != total:
                raise RuntimeError(f"{path}: /optim/{slot} holds {flat.size} values, the model "
                                   f"{total} parameters")
            for _, name, off, n in layout:
                st[f"{slot}:{name}"] = flat[off:off + n]
    return st


def near_ties(c64, c32):
    """Branches that float32 with another summation order may decide the other way:
    [(margin / tau, call, flat index, flipped max-pool choice or None)], nearest first. tau is
    K_TIE x the root-mean-square |float32 - float64| of that call's layer input (float32
    taking float64's branches), at least eps32 x its largest value. A ReLU is near when
    |input| < tau, a max-pool window when its two largest values differ by less than tau (and
    at all); either only where a gradient came back to that output (else a flip moves
    nothing)."""
    out = []
    for i, (v64, v32, d) in enumerate(zip(c64.seen, c32.seen, c64.taken)):
        if not v64.numel() or i not in c64.grads:
            continue
        noise = float((v32.double() - v64).pow(2).mean().sqrt())
        tau = max(K_TIE * noise, EPS32 * float(v64.abs().max()))
        live = c64.grads[i].reshape(-1) != 0
        if d.dtype == torch.bool:
            margin = v64.abs().reshape(-1)
            second = None
        else:
            top = v64.topk(2, dim=-1)
            margin = (top.values[..., 0] - top.values[..., 1]).reshape(-1)
            second = top.indices[..., 1].reshape(-1)
            live &= margin > 0
        for j in ((margin < tau) & live).nonzero().flatten().tolist():
            out.append((float(margin[j]) / tau, i, j, None if second is None else second[j]))
    out.sort(key=lambda t: t[0])
    return out


def flipped(taken, i, j, second):
    """The decisions `taken` with decision j of call i the other way."""
    out = list(taken)
    d = out[i].clone()
    if second is None:
        d.view(-1)[j] = ~d.view(-1)[j]
    else:
        d.view(-1)[j] = second
    out[i] = d
    return out


def span_errors(ours, r64, r32, start, allow):
    """ddptrain's state ours against float64's r64, the noise from the float32 states r32 (a
    tuple). Per tensor (name, max |ours - r64|, max (error - tie allowance) / tolerance, largest
    update, float32 noise), and problems (missing, extra or differently shaped tensors,
    counters that differ)."""
    rows, problems = [], []
    for k, ref in r64.items():
        if k not in ours:
            problems.append(f"{k}: torch keeps it, ddptrain does not")
            continue
        a = np.asarray(ours[k])
        if k == "t" or ref.dtype.kind != "f":
            if np.any(a != ref):
                problems.append(f"{k}: ddptrain {a}, torch {ref}")
            continue
        if a.shape != ref.shape:
            problems.append(f"{k}: shape {a.shape} in ddptrain, {ref.shape} in torch")
            continue
        err = np.abs(a.astype(np.float64) - ref)
        noise = max(float(np.abs(r[k] - ref).max()) for r in r32) if ref.size else 0.0
        upd = float(np.abs(ref - start.get(k, 0.0)).max()) if ref.size else 0.0
        tol = K_NOISE * noise + R_FLOOR * upd + ULPS * EPS32 * np.abs(ref)
        over = np.maximum(err - allow.get(k, 0.0), 0.0)  # what the near ties do not explain
        ratio = np.where(over > 0, over / np.maximum(tol, 1e-300), 0.0)
        rows.append((k, float(err.max(initial=0.0)), float(ratio.max(initial=0.0)), upd, noise))
    problems += [f"{k}: ddptrain keeps it, torch does not" for k in ours if k not in r64]
    return rows, problems


def check_span(case, models, sched, data, start, ours, k0, k1):
    """Steps k0+1..k1 from start: float64 (branches its own), float32 (float64's branches) in
    two summation orders, float64 once per near tie with that branch flipped; ddptrain's state
    ours against them."""
    (m64, m32), ((X64, Y), (X32, _)) = models, data
    c64 = Branches()
    r64, l64 = replay(m64, case, sched, X64, Y, start, k0, k1, c64)
    c32 = Branches(c64.taken)
    r32, l32 = replay(m32, case, sched, X32, Y, start, k0, k1, c32)
    # a second summation order: each batch's samples reversed (the same sums, added the other
    # way round), the branches reversed with them
    rev = [d.flip(0) for d in c64.taken]
    Xr, Yr = (t.reshape(case.micros, case.batch, *t.shape[1:]).flip(1).reshape(t.shape)
              for t in (X32, Y))
    r32r, _ = replay(m32, case, sched, Xr, Yr, start, k0, k1, Branches(rev))
    ties = near_ties(c64, c32)
    allow = {}
    for _, i, j, second in ties[:MAX_TIES]:
        rf, _ = replay(m64, case, sched, X64, Y, start, k0, k1,
                       Branches(flipped(c64.taken, i, j, second)))
        for k, v in r64.items():
            if v.dtype.kind == "f":
                allow[k] = allow.get(k, 0.0) + np.abs(rf[k] - v)
    rows, problems = span_errors(ours, r64, (r32, r32r), start, allow)
    return dict(rows=rows, problems=problems, l64=l64, l32=l32, ties=len(ties))


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


def torch_flops(model, in_shape):
    """Forward FLOPs per sample by ddptrain's convention (docs/report.md, check): 2 per
    multiply-add of conv2d and linear, 4 per batchnorm output, 1 per relu, dropout and residual
    join output, 1 per pool input."""
    total = [0]

    def hook(mod, inp, out):
        i, o = inp[0][0].numel(), out[0].numel()
        if isinstance(mod, nn.Conv2d):
            total[0] += 2 * o * mod.in_channels * mod.kernel_size[0] * mod.kernel_size[1]
        elif isinstance(mod, nn.Linear):
            total[0] += 2 * mod.in_features * mod.out_features
        elif isinstance(mod, (nn.BatchNorm1d, nn.BatchNorm2d)):
            total[0] += 4 * o
        elif isinstance(mod, (nn.ReLU, nn.Dropout, Residual)):
            total[0] += o
        elif isinstance(mod, (nn.MaxPool2d, nn.AvgPool2d, nn.AdaptiveAvgPool2d)):
            total[0] += i
    m = copy.deepcopy(model).eval()
    for x in m.modules():
        if x is not m and not isinstance(x, nn.Sequential):
            x.register_forward_hook(hook)
    with torch.no_grad():
        m(torch.zeros((1,) + tuple(in_shape)))
    return total[0]


def check_counts(ddptrain, tmp, name, model, in_shape):
    """`ddptrain check` on the case's job counts the parameters and forward FLOPs of the PyTorch
    model. Returns a list of problems."""
    job = os.path.join(tmp, name, "job.ini")
    r = subprocess.run([ddptrain, "check", job, "--set", "data.batch_size=8", "--set", "data.test=",
                        "--set", "dist.backend=none", "--set", f"job.output={tmp}/{name}/chk"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    mp = re.search(r"parameters\s+(\d+) ", r.stdout)
    mf = re.search(r"FLOPs\s+([0-9.]+) ([kMG]?)FLOP per sample", r.stdout)
    if r.returncode != 0 or not mp or not mf:
        return [f"ddptrain check failed ({r.returncode}): {r.stdout[-300:]}"]
    params = sum(p.numel() for p in model.parameters())
    flops = float(mf.group(1)) * {"": 1, "k": 1e3, "M": 1e6, "G": 1e9}[mf.group(2)]
    ref = torch_flops(model, in_shape)
    print(f"  check: {mp.group(1)} parameters (torch {params}), {mf.group(1)} {mf.group(2)}FLOP "
          f"per sample (torch, same convention: {ref})")
    out = []
    if int(mp.group(1)) != params:
        out.append(f"check counts {mp.group(1)} parameters, torch {params}")
    if abs(flops - ref) > 0.006 * ref:  # check prints 3 significant digits
        out.append(f"check counts {flops:.4g} FLOP per sample, torch by the same rule {ref}")
    return out


def check_output(ddptrain, tmp, case, model, run, last, steps):
    """model.h5 against the state_dict's names and shapes and the last checkpoint's values; one
    train record per step; `ddptrain check`'s counts. Returns problems."""
    problems = []
    sd = model.state_dict()
    for k, v in sd.items():
        if k not in run["final"]:
            problems.append(f"{k}: missing in ddptrain's model.h5")
        elif tuple(np.shape(run["final"][k])) != tuple(v.shape):
            problems.append(f"{k}: shape {np.shape(run['final'][k])} in model.h5, "
                            f"{tuple(v.shape)} in torch")
        elif not np.array_equal(np.asarray(run["final"][k], np.float64), last[k]):
            problems.append(f"{k}: model.h5 differs from the last checkpoint")
    problems += [f"{k}: in model.h5 but not in torch's state_dict" for k in run["final"]
                 if k not in sd]
    if len(run["losses"]) != steps:
        problems.append(f"{len(run['losses'])} train records in metrics.jsonl, expected {steps}")
    return problems + check_counts(ddptrain, tmp, case.name, model, (1, 28, 28))


def check_lr(lrs, sched):
    """ddptrain's logged lr of every step against torch's scheduler. Returns problems."""
    bad = [f"step {k + 1}: lr {a:.9g}, torch {b[0]:.9g}" for k, (a, b) in enumerate(zip(lrs, sched))
           if abs(a - b[0]) > LR_REL * abs(b[0])]
    return [f"lr differs from torch's scheduler at {len(bad)} steps: " + "; ".join(bad[:4])] \
        if bad else []


def worst_row(r):
    return max(r["rows"], key=lambda x: x[2], default=("-", 0.0, 0.0, 0.0, 0.0))


def span_line(label, r, extra=""):
    k, err, ratio, upd, noise = worst_row(r)
    return (f"  {label:<9} err/tol {ratio:8.2e} at {k} (err {err:.2e}, update {upd:.2e}, "
            f"f32 noise {noise:.2e}), near ties {r['ties']}{extra}")


def print_failed(r):
    for k, err, ratio, upd, noise in sorted(r["rows"], key=lambda x: -x[2])[:6]:
        if ratio > 1:
            print(f"      {k:<28} err {err:.3e} = {ratio:.3g} x tol (update {upd:.3e}, "
                  f"f32 noise {noise:.3e})")
    for p in r["problems"]:
        print(f"      {p}")


def replay_checks(case, model, sched, X, Y, states, run, steps, verbose):
    """The first steps end to end and every step from ddptrain's own state. Returns (worst
    end-to-end ratio, worst per-step ratio, its step, worst loss ratio, total near ties,
    problems)."""
    m64 = replay_model(case.layers, X.shape[1:], torch.float64)
    m32 = replay_model(case.layers, X.shape[1:], torch.float32)
    data = ((X.double(), Y), (X, Y))
    e = min(E2E_STEPS, steps)
    problems = []
    r = check_span(case, (m64, m32), sched, data, states[0], states[e], 0, e)
    e2e, ties = worst_row(r)[2], r["ties"]
    print(span_line(f"first {e}", r))
    if e2e > 1 or r["problems"]:
        print_failed(r)
        problems.append(f"first {e} steps end to end: err/tol {e2e:.3g}")
    worst, wstep, lworst = 0.0, 0, 0.0
    for k in range(1, steps + 1):
        r = check_span(case, (m64, m32), sched, data, states[k - 1], states[k], k - 1, k)
        ratio = worst_row(r)[2]
        l64, l32, lo = r["l64"][0], r["l32"][0], run["losses"][k - 1]
        ltol = K_NOISE * abs(l32 - l64) + ULPS * EPS32 * abs(l64)
        lratio = abs(lo - l64) / ltol
        ties += r["ties"]
        if ratio > worst:
            worst, wstep = ratio, k
        lworst = max(lworst, lratio)
        bad = ratio > 1 or r["problems"] or lratio > 1
        if verbose or bad:
            print(span_line(f"step {k}", r, f", loss {lo:.7f} (err/tol {lratio:.2g})"))
        if bad:
            print_failed(r)
            problems.append(f"step {k}: err/tol {ratio:.3g}, loss err/tol {lratio:.3g}"
                            + "".join(f"; {p}" for p in r["problems"]))
    return e2e, worst, wstep, lworst, ties, problems


def run_case(ddptrain, tmp, X, Y, case, verbose):
    """One case; returns a summary dict."""
    os.makedirs(os.path.join(tmp, case.name))
    steps = case.epochs * steps_per_epoch(case)
    n = case.batch * case.micros
    X, Y = X[:n], Y[:n]
    data_file = os.path.join(tmp, case.name, "data.h5")
    with h5py.File(data_file, "w") as f:
        f["train/images"] = X.numpy()
        f["train/labels"] = Y.numpy()
    torch.manual_seed(case.seed)
    model = build_torch(case.layers, X.shape[1:])
    init = os.path.join(tmp, case.name, "init.h5")
    save_init(model, init)
    opt_desc = ", ".join(f"{k}={v}" for k, v in case.optim.items())
    print(f"\n[{case.name}] {case.layers} | batch {case.batch}, {case.micros} batches x "
          f"{case.epochs} epochs = {steps} steps, {opt_desc}, recipe {case.recipe}, "
          f"seed {case.seed}")
    res = dict(name=case.name, steps=steps)
    try:
        run = run_ddptrain(ddptrain, tmp, case, data_file, init, steps)
        layout, total = flat_layout(replay_model(case.layers, X.shape[1:], torch.float64))
        states = [read_state(init, layout, total)] + [
            read_state(os.path.join(run["ckpt"], f"ckpt-{k:08d}.h5"), layout, total)
            for k in range(1, steps + 1)]
    except Exception as e:  # noqa: BLE001 - report, go on with the other cases
        print(f"  ddptrain failed: {e}")
        res.update(verdict="FAIL", why="ddptrain failed")
        return res
    sched = schedule(case)
    problems = check_output(ddptrain, tmp, case, model, run, states[-1], steps)
    problems += check_lr(run["lrs"], sched)
    e2e, worst, wstep, lworst, ties, more = replay_checks(case, model, sched, X, Y, states, run,
                                                          steps, verbose)
    print(f"  per step: worst err/tol {worst:.2e} (step {wstep}), loss err/tol {lworst:.2g}")
    for p in problems:
        print(f"  {p}")
    problems += more
    res.update(verdict="FAIL" if problems else "ok", e2e=e2e, worst=worst, wstep=wstep,
               loss=lworst, ties=ties, problems=problems)
    return res


def main():
    torch.set_num_threads(1)
    ddptrain = find_ddptrain()
    keep = os.environ.get("DDP_PARITY_KEEP") == "1"
    verbose = os.environ.get("DDP_PARITY_VERBOSE") == "1"
    only = [c for c in os.environ.get("DDP_PARITY_CASES", "").split(",") if c]
    tmp = tempfile.mkdtemp(prefix="ddp-parity-")
    failed = []
    try:
        data_file, data_desc = get_dataset(ddptrain, tmp)
        X, Y = load_split(data_file, max(c.batch * c.micros for c in CASES))
        print(f"ddptrain {ddptrain}; torch {torch.__version__}; data {data_file} ({data_desc}); "
              f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '')}")
        print(f"pass: |ddptrain - torch f64| <= {K_NOISE} x f32 noise + {R_FLOOR:g} x update + "
              f"{ULPS} eps32 |value| + near-tie allowance, per tensor, over the first "
              f"{E2E_STEPS} steps and every single step from ddptrain's state")
        results = [run_case(ddptrain, tmp, X, Y, c, verbose) for c in CASES
                   if not only or c.name in only]
        print(f"\n{'case':<28} {'steps':>5} {'first':>8} {'per step':>8} {'(step)':>6} "
              f"{'loss':>7} {'ties':>5}  result")
        print(f"{'':<28} {'':>5} {'err/tol':>8} {'err/tol':>8} {'':>6} {'err/tol':>7} "
              f"{'':>5}")
        for r in results:
            verdict = r["verdict"]
            if verdict != "ok":
                failed.append(r["name"])
            if "e2e" not in r:
                print(f"{r['name']:<28} {r['steps']:5d} {'-':>8} {'-':>8} {'-':>6} {'-':>7} "
                      f"{'-':>5}  {verdict} ({r.get('why', '')})")
                continue
            print(f"{r['name']:<28} {r['steps']:5d} {r['e2e']:8.2e} {r['worst']:8.2e} "
                  f"{r['wstep']:6d} {r['loss']:7.2g} {r['ties']:5d}  {verdict}")
    finally:
        if keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    if failed:
        print(f"\nFAIL: {', '.join(failed)}")
        return 1
    print("\nPASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
