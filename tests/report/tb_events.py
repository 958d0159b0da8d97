#!/usr/bin/python3
"""[job] tensorboard = true: TensorBoard's own reader (EventAccumulator, from PyPI's
tensorboard in tools/pyvenv.sh's venv) reads every scalar of metrics.jsonl back, with its
step and its value as float32, across a preempted and resumed run (two event files), and
nothing else; the run holds out a validation share, so val/loss and val/acc are there too. Two ranks under mpirun when it is there, so that the all-reduce series exist.
Skips (77) only when the venv cannot be installed."""
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import seelib  # noqa: E402

seelib.venv_python_or_skip(["tensorboard"])
import numpy as np  # noqa: E402
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa

JOB = """[job]
output = out
tensorboard = true
[data]
file = d.h5
batch_size = 16
val_fraction = 0.25
[model]
layers = flatten, linear(16), relu, linear(4)
[train]
epochs = 300
log_every = 2
threads = 1
"""


def expected(recs):
    want = {}
    for r in recs:
        if r["kind"] == "train":
            for k, v in r.items():
                if k not in ("kind", "epoch", "step"):
                    want.setdefault("train/" + k, []).append((r["step"], v))
        elif r["kind"] == "eval":
            want.setdefault("test/loss", []).append((r["step"], r["test_loss"]))
            want.setdefault("test/acc", []).append((r["step"], r["test_acc"]))
        elif r["kind"] == "val":
            want.setdefault("val/loss", []).append((r["step"], r["val_loss"]))
            want.setdefault("val/acc", []).append((r["step"], r["val_acc"]))
    return want


def main():
    tmp = tempfile.mkdtemp()
    seelib.run(["data", "synth", "-o", "d.h5", "--shape", "1,4,4", "--classes", "4", "--train",
                "1024", "--test", "64"], tmp)
    with open(os.path.join(tmp, "job.ini"), "w") as f:
        f.write(JOB)
    launch = []
    if shutil.which("mpirun"):
        launch = ["--oversubscribe", "-n", "2"]
    args = ["job.ini"]
    if launch:  # two ranks: the all-reduce series too
        os.environ.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                          OMPI_MCA_mpi_yield_when_idle="1")
        cmd = ["mpirun"] + launch + [seelib.ddptrain()]
        seelib.ddptrain = lambda: cmd[0]
        prefix = cmd[1:]
        args = prefix + args
    rc = seelib.train_until_logged(args, tmp, 3)
    if rc != 75:
        sys.exit(f"FAIL: preempted run exited {rc}, want 75")
    recs = seelib.metrics(os.path.join(tmp, "out"))
    step = max(r["step"] for r in recs if "step" in r)
    seelib.run(args + ["--set", f"train.max_steps={step + 70}"], tmp)
    recs = seelib.metrics(os.path.join(tmp, "out"))
    files = os.listdir(os.path.join(tmp, "out", "tb"))
    if len(files) != 2:
        sys.exit(f"FAIL: tb/ holds {files}, want two event files (one per start)")
    ea = EventAccumulator(os.path.join(tmp, "out", "tb"), size_guidance={"scalars": 0})
    ea.Reload()
    want, errors, n = expected(recs), [], 0
    if "val/acc" not in want:
        errors.append("metrics.jsonl has no val record")
    got_tags = set(ea.Tags()["scalars"])
    if got_tags != set(want):
        errors.append(f"tags {sorted(got_tags)} but metrics.jsonl has {sorted(want)}")
    for tag in sorted(set(want) & got_tags):
        got = [(e.step, e.value) for e in ea.Scalars(tag)]
        w = [(s, float(np.float32(v))) for s, v in want[tag]]
        if len(got) != len(w):
            errors.append(f"{tag}: {len(got)} events, metrics.jsonl has {len(w)}")
            continue
        for (gs, gv), (ws, wv) in zip(got, w):
            if gs != ws or not np.isclose(gv, wv, rtol=1e-6, atol=0):
                errors.append(f"{tag}: step {gs} value {gv}, metrics.jsonl: step {ws} {wv}")
                break
            n += 1
    for e in errors[:20]:
        print("FAIL:", e)
    print(f"tensorboard: {n} scalars in {len(got_tags)} tags read back by EventAccumulator, "
          f"{len(errors)} errors")
    return 1 if errors or n < 50 else 0


if __name__ == "__main__":
    sys.exit(main())
