#!/usr/bin/python3
"""`ddptrain predict` on data without labels: an MLP trained a few steps on the real
Fashion-MNIST predicts a file whose group holds only `images` (the first 1000 test images,
uint8, in a group of another name given by --group): it writes the same logits and
predictions as for the labelled test split, and its log says there is no accuracy. The
labelled run still prints the accuracy, equal to that of its predictions."""
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import seelib  # noqa: E402

import h5py  # noqa: E402
import numpy as np  # noqa: E402

N = 1000


def main():
    tmp = tempfile.mkdtemp()
    data = seelib.fashion_mnist(tmp)
    job = os.path.join(seelib.src(), "configs/fashion-mlp.ini")
    sets = ["--set", f"data.file={data}", "--set", f"job.output={tmp}/run", "--set",
            "train.max_steps=12", "--set", "data.batch_size=64"]
    seelib.run([job] + sets, tmp, timeout=600)
    model = f"{tmp}/run/model.h5"
    errors = []

    r = seelib.run(["predict", job, "--checkpoint", model, "--input", data, "--output",
                    f"{tmp}/labelled.h5"] + sets, tmp, timeout=600)
    with h5py.File(f"{tmp}/labelled.h5", "r") as f:
        logits, pred = f["logits"][()], f["predictions"][()]
    with h5py.File(data, "r") as f:
        images, y = f["test/images"][:N], f["test/labels"][()]
    m = re.search(r"accuracy against its labels ([0-9.]+)", r.stderr + r.stdout)
    acc = f"{float(np.mean(pred == y)):.4f}"
    if not m or m.group(1) != acc:
        errors.append(f"labelled predict: expected accuracy {acc} in its log:\n{r.stderr}")

    new = f"{tmp}/new.h5"
    with h5py.File(new, "w") as f:
        f["photos/images"] = images  # no labels, no classes attribute
    r = seelib.run(["predict", job, "--checkpoint", model, "--input", new, "--group", "photos",
                    "--output", f"{tmp}/unlabelled.h5"] + sets, tmp, timeout=600)
    log = r.stderr + r.stdout
    with h5py.File(f"{tmp}/unlabelled.h5", "r") as f:
        ul, up = f["logits"][()], f["predictions"][()]
    print(f"labelled accuracy {acc}; unlabelled: {ul.shape} logits, log: "
          f"{log.strip().splitlines()[-1] if log.strip() else ''}")
    if ul.shape != (N, 10) or not np.array_equal(ul, logits[:N]) or \
            not np.array_equal(up, pred[:N]):
        errors.append("images-only predict gives other logits or predictions than the "
                      "labelled test split")
    if "no labels" not in log or "accuracy against" in log:
        errors.append(f"images-only predict: log should say there are no labels:\n{log}")

    for e in errors:
        print("FAIL:", e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
