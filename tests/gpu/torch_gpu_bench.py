#!/usr/bin/env python3
"""PyTorch side of tests/gpu/device-check.sh: the same model (the ddptrain layer string, built
by tests/unit/parity.py's build_torch), batch, data and optimiser (SGD, momentum 0.9) as a
ddptrain run, on the same GPU. The training split is held on the host as float32 and each
batch is gathered and copied to the GPU per step, as ddptrain does; no per-step host sync
besides that copy. Timed with torch.cuda.synchronize() around the steps after --warmup.
fp32 by default (TF32 off for matmuls and cuDNN convolutions); --tf32 allows it.
Writes a JSON result to --json and prints it. Not a test: numbers only.
"""
import argparse
import json
import os
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--layers", required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--steps", type=int, required=True, help="steps in all, warmup included")
    ap.add_argument("--warmup", type=int, required=True)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--tf32", action="store_true")
    ap.add_argument("--json", required=True)
    a = ap.parse_args()

    import h5py
    import numpy as np
    import torch
    import torch.nn.functional as F
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(here, "..", "unit"))
    from parity import build_torch

    torch.backends.cuda.matmul.allow_tf32 = a.tf32
    torch.backends.cudnn.allow_tf32 = a.tf32
    torch.backends.cudnn.benchmark = True
    dev = torch.device("cuda")
    with h5py.File(a.data, "r") as f:
        imgs = f["train/images"][()]
        labels = f["train/labels"][()]
    X = torch.from_numpy(imgs).float().div_(255.0) if imgs.dtype == np.uint8 else \
        torch.from_numpy(imgs.astype(np.float32))
    Y = torch.from_numpy(labels.astype(np.int64))
    N = X.shape[0]
    torch.manual_seed(1234)
    model = build_torch(a.layers, X.shape[1:]).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
    model.train()
    g = torch.Generator()
    g.manual_seed(1234)
    perm, pos = torch.randperm(N, generator=g), 0
    t0 = None
    for step in range(a.steps):
        if pos + a.batch > N:
            perm, pos = torch.randperm(N, generator=g), 0
        bi = perm[pos:pos + a.batch]
        pos += a.batch
        xb = X.index_select(0, bi).to(dev)
        yb = Y.index_select(0, bi).to(dev)
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
        if step + 1 == a.warmup:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    timed = a.steps - a.warmup
    res = dict(samples_per_s=timed * a.batch / (t1 - t0), timed_steps=timed,
               wall_timed_s=t1 - t0, loss=float(loss.item()), tf32=a.tf32,
               torch=torch.__version__, device=torch.cuda.get_device_name(0))
    with open(a.json, "w") as f:
        json.dump(res, f)
    print(json.dumps(res))


if __name__ == "__main__":
    main()
