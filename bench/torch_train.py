#!/usr/bin/python3
"""PyTorch side of bench/compare: the same model, batch, data and threads as a ddptrain run.

One process per rank. Several ranks: start one process per rank with RANK, WORLD_SIZE,
MASTER_ADDR and MASTER_PORT set (what torchrun does); they use DDP over gloo. The training split
of the HDF5 file is loaded fully into memory (as float32 in [0, 1], ready to index), batches follow
DistributedSampler's layout (a permutation per epoch, rank r takes positions r, r+W, ...), the
loss is CrossEntropyLoss (mean) and the optimiser SGD with momentum 0.9.

Prints `FIRST_STEP` (flushed) as soon as the first step is done, so the caller can time process
start to first step; writes a JSON result (rank 0's throughput over the timed steps after
--warmup, in global samples/s; peak RSS of this process) to --json PATH.RANK.
"""
import argparse
import json
import os
import resource
import sys
import time

T_IMPORT0 = time.time()


def augment(torch, F, xb, P, hflip):
    """torchvision's RandomCrop(size, padding=P) (P > 0) then RandomHorizontalFlip (hflip), per
    sample of the batch (B, C, H, W), as ddptrain's loader does (zero padding)."""
    B, C, H, W = xb.shape
    out = xb
    if P:
        xp = F.pad(xb, (P, P, P, P))
        oy = torch.randint(0, 2 * P + 1, (B,))
        ox = torch.randint(0, 2 * P + 1, (B,))
        rows = (oy[:, None] + torch.arange(H))[:, None, :, None]
        cols = (ox[:, None] + torch.arange(W))[:, None, None, :]
        out = xp[torch.arange(B)[:, None, None, None], torch.arange(C)[None, :, None, None],
                 rows, cols]
    if not hflip:
        return out
    flip = torch.rand(B) < 0.5
    return torch.where(flip[:, None, None, None], out.flip(3), out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--layers", required=True, help="ddptrain [model] layers string")
    ap.add_argument("--batch", type=int, required=True, help="per rank")
    ap.add_argument("--steps", type=int, required=True, help="steps in all, warmup included")
    ap.add_argument("--warmup", type=int, required=True, help="untimed steps first")
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--json", required=True)
    ap.add_argument("--crop-pad", type=int, default=0,
                    help="[data] augment = random_crop(pad=P): per sample, every step")
    ap.add_argument("--hflip", action="store_true", help="[data] augment = hflip")
    ap.add_argument("--normalize", default="", help="MEAN,STD (one channel)")
    ap.add_argument("--label-smoothing", type=float, default=0.0)
    ap.add_argument("--nesterov", action="store_true")
    ap.add_argument("--weight-decay", type=float, default=0.0)
    a = ap.parse_args()

    import h5py
    import numpy as np
    import torch
    import torch.nn.functional as F
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                    "unit"))
    from parity import build_torch  # same layer-string -> nn.Sequential as the parity test

    torch.set_num_threads(a.threads)
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        import torch.distributed as dist
        dist.init_process_group("gloo", rank=rank, world_size=world)

    with h5py.File(a.data, "r") as f:
        imgs = f["train/images"][()]
        labels = f["train/labels"][()]
    X = torch.from_numpy(imgs).float().div_(255.0) if imgs.dtype == np.uint8 else \
        torch.from_numpy(imgs.astype(np.float32))
    del imgs
    Y = torch.from_numpy(labels.astype(np.int64))
    N = X.shape[0]

    torch.manual_seed(1234)
    model = build_torch(a.layers, X.shape[1:])
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = DDP(model)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9, nesterov=a.nesterov,
                          weight_decay=a.weight_decay)
    norm = [float(v) for v in a.normalize.split(",")] if a.normalize else None
    model.train()

    per_rank = -(-N // world)  # DistributedSampler without drop_last: pad to a multiple of W
    steps_per_epoch = -(-per_rank // a.batch)
    epoch, pos, idx = -1, steps_per_epoch, None
    t_first = t0 = None
    for step in range(a.steps):
        if pos == steps_per_epoch:
            epoch += 1
            g = torch.Generator()
            g.manual_seed(1234 + epoch)
            perm = torch.randperm(N, generator=g)
            perm = torch.cat([perm, perm[:per_rank * world - N]])
            idx = perm[rank::world]
            pos = 0
        bi = idx[pos * a.batch:(pos + 1) * a.batch]
        pos += 1
        xb, yb = X.index_select(0, bi), Y.index_select(0, bi)
        if a.crop_pad or a.hflip:
            xb = augment(torch, F, xb, a.crop_pad, a.hflip)
        if norm:
            xb = (xb - norm[0]) / norm[1]
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(xb), yb, label_smoothing=a.label_smoothing)
        loss.backward()
        opt.step()
        if step == 0:
            t_first = time.time()
            if rank == 0:
                print("FIRST_STEP", flush=True)
        if step + 1 == a.warmup:
            t0 = time.perf_counter()
    t1 = time.perf_counter()
    timed = a.steps - a.warmup
    # global samples/s: every rank does the same number of steps of `batch`
    sps = timed * a.batch * world / (t1 - t0)
    res = dict(rank=rank, world=world, threads=a.threads, samples_per_s=sps,
               timed_steps=timed, wall_timed_s=t1 - t0, first_step_unix=t_first,
               import_unix=T_IMPORT0, loss=float(loss.item()),
               maxrss_kib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
               torch=torch.__version__, num_threads=torch.get_num_threads())
    with open(f"{a.json}.{rank}", "w") as f:
        json.dump(res, f)
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
