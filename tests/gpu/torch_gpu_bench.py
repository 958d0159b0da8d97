#!/usr/bin/env python3
"""PyTorch side of tests/gpu/device-check.sh: the same model (the ddptrain layer string, built
by tests/unit/parity.py's build_torch), batch and optimiser (SGD, momentum 0.9) as a ddptrain
run, on the same GPU, with PyTorch's fastest data path: the whole training split preloaded on
the device as float32 (uint8 scaled by 1/255 as ToTensor does), each batch gathered there with
index_select from a device permutation, so no host work or copy per step.

--runs MODE:PRECISION,...: the variants, run one after another in this process (one import,
one preload), each with a fresh model of the same seed, in the order given while --budget-s
lasts (a variant not started in time is "skipped"). MODE eager or compile (torch.compile(model),
default mode); PRECISION fp32 (TF32 off for matmuls and cuDNN), tf32 (allowed) or bf16
(torch.autocast bf16: bf16 GEMMs and convolutions, fp32 master weights, loss in fp32; a model
with convolutions and its batches in channels_last, PyTorch's fastest bf16 layout). Timed
with torch.cuda.synchronize() around the steps after --warmup. Peak memory: torch.cuda.max_memory_allocated() over the timed run minus the preloaded
split (model, gradients, optimiser state, activations, workspace: what ddptrain's
gpu_mem_peak_bytes counts); the split's bytes are reported apart.

--device cpu runs the same on the CPU (device-check.sh --dry: the plumbing, not the speed);
where this PyTorch has no torch.compile (Debian's 1.13) or no bf16 autocast the result says
"skipped" with the reason. Writes the JSON list of results to --json after every variant (a
timeout keeps what finished) and prints each. Not a test: numbers.
"""
import argparse
import json
import os
import sys
import time


def parse():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--layers", required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--steps", type=int, required=True, help="steps in all, warmup included")
    ap.add_argument("--warmup", type=int, required=True)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--runs", default="eager:fp32", help="MODE:PRECISION,... (see above)")
    ap.add_argument("--budget-s", type=float, default=1e9)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--json", required=True)
    a = ap.parse_args()
    if a.warmup < 1 or a.steps <= a.warmup:
        ap.error("need 1 <= --warmup < --steps")
    a.variants = []
    for v in a.runs.split(","):
        mode, _, prec = v.partition(":")
        if mode not in ("eager", "compile") or prec not in ("fp32", "tf32", "bf16"):
            ap.error(f"--runs: {v!r}: expected eager|compile:fp32|tf32|bf16")
        a.variants.append((mode, prec))
    return a


class Bench:
    """The preloaded split and one variant at a time."""

    def __init__(self, a):
        import h5py
        import numpy as np
        import torch
        here = os.path.dirname(os.path.abspath(__file__))
        sys.path.insert(0, os.path.join(here, "..", "unit"))
        from parity import build_torch
        self.a, self.torch, self.build = a, torch, build_torch
        self.dev = torch.device(a.device)
        self.cuda = self.dev.type == "cuda"
        with h5py.File(a.data, "r") as f:
            imgs = f["train/images"][()]
            labels = f["train/labels"][()]
        X = torch.from_numpy(imgs).to(self.dev)
        self.X = X.float().div_(255.0) if imgs.dtype == np.uint8 else X.float()
        self.Y = torch.from_numpy(labels.astype(np.int64)).to(self.dev)
        self.data_bytes = (self.X.numel() * self.X.element_size() +
                           self.Y.numel() * self.Y.element_size())
        self.sync = torch.cuda.synchronize if self.cuda else (lambda: None)

    def skip_reason(self, mode, prec):
        torch = self.torch
        if mode == "compile" and not hasattr(torch, "compile"):
            return f"torch {torch.__version__} has no torch.compile"
        if prec == "bf16":
            try:
                with torch.autocast(device_type=self.dev.type, dtype=torch.bfloat16):
                    pass
            except (RuntimeError, TypeError, AttributeError) as e:
                return f"no bf16 autocast on {self.dev.type} in torch {torch.__version__}: {e}"
        return None

    def run(self, mode, prec):
        torch, a = self.torch, self.a
        import torch.nn.functional as F
        res = dict(mode=mode, precision=prec, batch=a.batch, torch=torch.__version__)
        why = self.skip_reason(mode, prec)
        if why:
            res["skipped"] = why
            return res
        if self.cuda:
            torch.backends.cuda.matmul.allow_tf32 = prec == "tf32"
            torch.backends.cudnn.allow_tf32 = prec == "tf32"
            torch.backends.cudnn.benchmark = True
            res["device"] = torch.cuda.get_device_name(0)
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        if mode == "compile":
            torch._dynamo.reset()
        torch.manual_seed(1234)
        X, Y, N = self.X, self.Y, self.X.shape[0]
        model = self.build(a.layers, X.shape[1:]).to(self.dev)
        # bf16 convolutions at PyTorch's best: channels_last (cuDNN's NHWC tensor-core kernels)
        cl = prec == "bf16" and any(isinstance(m, torch.nn.Conv2d) for m in model.modules())
        if cl:
            model = model.to(memory_format=torch.channels_last)
        res["channels_last"] = cl
        opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
        model.train()
        fwd = torch.compile(model) if mode == "compile" else model
        amp = prec == "bf16"
        g = torch.Generator(device=self.dev)
        g.manual_seed(1234)
        perm, pos = torch.randperm(N, generator=g, device=self.dev), 0
        t0 = t_start = time.perf_counter()
        for step in range(a.steps):
            if pos + a.batch > N:
                perm, pos = torch.randperm(N, generator=g, device=self.dev), 0
            bi = perm[pos:pos + a.batch]
            pos += a.batch
            xb, yb = X.index_select(0, bi), Y.index_select(0, bi)
            if cl:
                xb = xb.contiguous(memory_format=torch.channels_last)
            opt.zero_grad(set_to_none=True)
            if amp:
                with torch.autocast(device_type=self.dev.type, dtype=torch.bfloat16):
                    logits = fwd(xb)
                loss = F.cross_entropy(logits.float(), yb)
            else:
                loss = F.cross_entropy(fwd(xb), yb)
            loss.backward()
            opt.step()
            if step + 1 == a.warmup:
                self.sync()
                t0 = time.perf_counter()
        self.sync()
        t1 = time.perf_counter()
        timed = a.steps - a.warmup
        res.update(samples_per_s=timed * a.batch / (t1 - t0), timed_steps=timed,
                   wall_timed_s=t1 - t0, warmup_s=t0 - t_start, loss=float(loss.item()),
                   data_bytes=self.data_bytes)
        if self.cuda:
            res["peak_mem_bytes"] = torch.cuda.max_memory_allocated() - self.data_bytes
        return res


def main():
    a = parse()
    t_start = time.perf_counter()
    bench = Bench(a)
    out = []
    for mode, prec in a.variants:
        if time.perf_counter() - t_start > a.budget_s:
            res = dict(mode=mode, precision=prec, batch=a.batch,
                       skipped=f"out of time (--budget-s {a.budget_s:g})")
        else:
            res = bench.run(mode, prec)
        out.append(res)
        print(json.dumps(res), flush=True)
        with open(a.json + ".tmp", "w") as f:
            json.dump(out, f)
        os.replace(a.json + ".tmp", a.json)


if __name__ == "__main__":
    main()
