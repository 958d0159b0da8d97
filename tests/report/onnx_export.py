#!/usr/bin/python3
"""`ddptrain export --onnx-input float` (the model alone, its input already scaled and
normalised; onnx_pixels.py tests the default uint8 input) writes ONNX that onnx.checker accepts
and onnxruntime runs to the same logits as ddptrain: for the shipped MLP, CNN and ResNet jobs,
a CNN with every other layer kind (batchnorm after conv and linear, dropout, avgpool, strided
padded conv) and a ResNet with a nested block and layers without bias (Add,
GlobalAveragePool, Conv and Gemm without bias, BatchNormalization inside blocks), each trained
a few steps on the real Fashion-MNIST, `ddptrain predict` writes the test split's logits; they must
give `ddptrain eval`'s accuracy and loss exactly as it prints them, and onnxruntime's logits
must equal them within 1e-5. onnx and onnxruntime come from tools/pyvenv.sh (skip 77 only
when they cannot be installed)."""
import math
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import seelib  # noqa: E402

seelib.venv_python_or_skip(["onnx", "onnxruntime", "h5py"])
import h5py  # noqa: E402
import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402

ALL_KINDS = ("conv2d(8, 3, pad=1), batchnorm, relu, maxpool(2), dropout(0.25), "
             "conv2d(16, 3, stride=2, pad=1), batchnorm, relu, avgpool(2), flatten, "
             "linear(32), batchnorm, relu, dropout(0.5), linear(10)")
# a nested block, an identity shortcut, conv and linear with and without bias
NESTED = ("conv2d(8, 3, pad=1, bias=false), batchnorm, relu, "
          "residual(conv2d(8, 3, pad=1), relu, residual(conv2d(8, 3, pad=1, bias=false), "
          "batchnorm)), relu, residual(conv2d(16, 3, stride=2, pad=1, bias=false), batchnorm), "
          "globalavgpool, flatten, linear(10, bias=false)")
# 12 steps leave batchnorm's running statistics far from the batches' (every test sample gets
# the same class); 30 at a lower lr give logits of a model that tells classes apart
RESNET_STEPS = ["--set", "train.max_steps=30", "--set", "optim.lr=0.05"]
JOBS = [("mlp", "configs/fashion-mlp.ini", []),
        ("cnn", "configs/fashion-cnn.ini", []),
        ("cnn-all-kinds", "configs/fashion-cnn.ini", ["--set", "model.layers=" + ALL_KINDS]),
        ("resnet", "configs/fashion-resnet.ini", RESNET_STEPS),
        ("resnet-nested", "configs/fashion-resnet.ini",
         RESNET_STEPS + ["--set", "model.layers=" + NESTED])]
TOL = 1e-5


def normalize_of(job):
    """[data] normalize of the job file: (means, stds) per channel, or None. The ONNX graph is
    the model alone, so its input is normalised as ddptrain's loader does (docs/report.md)."""
    import configparser
    cp = configparser.ConfigParser(inline_comment_prefixes=(";", "#"), strict=False)
    cp.read(job)
    v = cp.get("data", "normalize", fallback="").strip()
    if not v:
        return None
    vals = [float(t) for t in v.split(",")]
    return vals[:len(vals) // 2], vals[len(vals) // 2:]


def one(name, cfg, extra, data, tmp):
    job = os.path.join(seelib.src(), cfg)
    sets = ["--set", f"data.file={data}", "--set", f"job.output={tmp}/{name}", "--set",
            "train.max_steps=12", "--set", "data.batch_size=64"] + extra
    seelib.run([job] + sets, tmp, timeout=600)
    model = f"{tmp}/{name}/model.h5"
    onnx_path = f"{tmp}/{name}.onnx"
    seelib.run(["export", job, "--checkpoint", model, "--onnx", onnx_path, "--onnx-input",
                "float"] + sets, tmp)
    m = onnx.load(onnx_path)
    onnx.checker.check_model(m, full_check=True)
    opset = max(o.version for o in m.opset_import if o.domain in ("", "ai.onnx"))
    if opset < 17:
        return [f"{name}: opset {opset} < 17"]
    ev = seelib.run(["eval", job, "--checkpoint", model] + sets, tmp).stdout
    mt = re.search(r"test loss ([0-9.]+) accuracy ([0-9.]+)", ev)
    pred = f"{tmp}/{name}-pred.h5"
    seelib.run(["predict", job, "--checkpoint", model, "--input", data, "--output", pred] +
               sets, tmp, timeout=600)
    with h5py.File(pred, "r") as f:
        logits, predictions = f["logits"][()], f["predictions"][()]
    with h5py.File(data, "r") as f:
        x = f["test/images"][()].astype(np.float32) / 255.0
        y = f["test/labels"][()].astype(np.int64)
    norm = normalize_of(job)
    if norm:
        for c, (mu, sd) in enumerate(zip(*norm)):
            x[:, c] = (x[:, c] - np.float32(mu)) / np.float32(sd)
    errors = []
    lse = np.log(np.exp(logits.astype(np.float64) - logits.max(1, keepdims=True)).sum(1)) + \
        logits.max(1)
    loss = float(np.mean(lse - logits[np.arange(len(y)), y]))
    acc = float(np.mean(predictions == y))
    if f"{loss:.4f}" != mt.group(1) or f"{acc:.4f}" != mt.group(2):
        errors.append(f"{name}: predict's logits give loss {loss:.4f} accuracy {acc:.4f}, "
                      f"eval printed {mt.group(1)} {mt.group(2)}")
    sess = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
    got = sess.run(["logits"], {"input": x})[0]
    diff = float(np.max(np.abs(got - logits)))
    print(f"{name}: opset {opset}, {len(m.graph.node)} nodes, test accuracy {acc:.4f}, "
          f"max |onnxruntime - ddptrain| = {diff:.3g} over {logits.size} logits")
    if not diff <= TOL:
        errors.append(f"{name}: onnxruntime differs from ddptrain's logits by {diff:.3g} > {TOL}")
    return errors


def main():
    tmp = tempfile.mkdtemp()
    data = seelib.fashion_mnist(tmp)
    errors = []
    for name, cfg, extra in JOBS:
        errors += one(name, cfg, extra, data, tmp)
    for e in errors:
        print("FAIL:", e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
