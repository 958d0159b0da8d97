#!/usr/bin/python3
"""compare_h5.py A.h5 B.h5 TOL - every /model tensor of A and B agree: max|a-b| <= TOL * max|b|
(per tensor, relative to its scale). Prints the worst tensor; exit 1 on disagreement."""
import sys

import h5py
import numpy as np

a, b, tol = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r"), float(sys.argv[3])
names = sorted(a["model"].keys())
if names != sorted(b["model"].keys()):
    print("tensor names differ:", names, sorted(b["model"].keys()))
    sys.exit(1)
worst, worst_name, bad = 0.0, "", []
for n in names:
    x, y = np.asarray(a["model"][n][()], np.float64), np.asarray(b["model"][n][()], np.float64)
    if x.shape != y.shape:
        bad.append(f"{n}: shape {x.shape} vs {y.shape}")
        continue
    scale = max(float(np.max(np.abs(y))), 1e-30)
    rel = float(np.max(np.abs(x - y))) / scale if x.size else 0.0
    if rel > worst:
        worst, worst_name = rel, n
    if rel > tol:
        bad.append(f"{n}: relative difference {rel:.3g} > {tol}")
print(f"{len(names)} tensors, worst relative difference {worst:.3g} ({worst_name})")
for line in bad:
    print("  " + line)
sys.exit(1 if bad else 0)
