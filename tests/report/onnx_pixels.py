#!/usr/bin/python3
"""`ddptrain export` of a job whose images are stored as uint8 writes ONNX whose input is those
raw pixels: a CNN with `[data] normalize`, trained a few steps on the real Fashion-MNIST, is
exported with the default input (uint8, with Cast, Div by 255, Sub and Div of the
normalisation in the graph); onnxruntime on the raw uint8 test images must give `ddptrain
eval`'s accuracy as it prints it and `ddptrain predict`'s logits within 1e-4. `--onnx-input
float` still gives the model alone (float input, already scaled and normalised); a copy of
the data stored as float32 exports with a float input by default and refuses `--onnx-input
uint8`; an unknown --onnx-input is a usage error. onnx and onnxruntime come from
tools/pyvenv.sh (skip 77 only when they cannot be installed)."""
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

MEAN, STD = 0.2860, 0.3530
TOL = 1e-4


def export(job, sets, model, out, tmp, extra=(), code=0):
    r = seelib.run(["export", job, "--checkpoint", model, "--onnx", out] + list(extra) + sets,
                   tmp, check=False)
    if r.returncode != code:
        sys.exit(f"FAIL: export {' '.join(extra)} exited {r.returncode}, expected {code}:\n"
                 f"{r.stderr}")
    return r.stderr + r.stdout


def input_type(path):
    m = onnx.load(path)
    onnx.checker.check_model(m, full_check=True)
    t = m.graph.input[0].type.tensor_type.elem_type
    return onnx.TensorProto.DataType.Name(t), [n.op_type for n in m.graph.node]


def float_copy(data, tmp):
    """The first 512 samples of each split stored as float32 (v / 255), labels kept."""
    path = f"{tmp}/fashion-float.h5"
    with h5py.File(data, "r") as f, h5py.File(path, "w") as g:
        for split in ("train", "test"):
            g[f"{split}/images"] = f[f"{split}/images"][:512].astype(np.float32) / 255.0
            g[f"{split}/labels"] = f[f"{split}/labels"][:512]
            g[split].attrs["classes"] = 10
    return path


def main():
    tmp = tempfile.mkdtemp()
    data = seelib.fashion_mnist(tmp)
    job = os.path.join(seelib.src(), "configs/fashion-cnn.ini")
    sets = ["--set", f"data.file={data}", "--set", f"job.output={tmp}/run", "--set",
            "train.max_steps=12", "--set", "data.batch_size=64", "--set",
            f"data.normalize={MEAN}, {STD}"]
    seelib.run([job] + sets, tmp, timeout=600)
    model = f"{tmp}/run/model.h5"
    errors = []

    log = export(job, sets, model, f"{tmp}/pixels.onnx", tmp)
    itype, ops = input_type(f"{tmp}/pixels.onnx")
    print(f"default export: input {itype}, first nodes {ops[:4]}")
    if itype != "UINT8" or ops[:4] != ["Cast", "Div", "Sub", "Div"]:
        errors.append(f"default export of uint8 data: input {itype}, nodes {ops[:4]}; expected "
                      "UINT8 and Cast, Div, Sub, Div")
    if "ONNX input: uint8" not in log:
        errors.append(f"the export log does not say the input is uint8:\n{log}")

    ev = seelib.run(["eval", job, "--checkpoint", model] + sets, tmp).stdout
    acc_eval = re.search(r"test loss ([0-9.]+) accuracy ([0-9.]+)", ev).group(2)
    pred = f"{tmp}/pred.h5"
    seelib.run(["predict", job, "--checkpoint", model, "--input", data, "--output", pred] +
               sets, tmp, timeout=600)
    with h5py.File(pred, "r") as f:
        logits = f["logits"][()]
    with h5py.File(data, "r") as f:
        pixels, y = f["test/images"][()], f["test/labels"][()].astype(np.int64)

    sess = ort.InferenceSession(f"{tmp}/pixels.onnx", providers=["CPUExecutionProvider"])
    got = sess.run(["logits"], {"input": pixels})[0]
    diff = float(np.max(np.abs(got - logits)))
    acc_ort = f"{float(np.mean(got.argmax(1) == y)):.4f}"
    print(f"test accuracy: ddptrain eval {acc_eval}, onnxruntime on raw uint8 pixels {acc_ort}; "
          f"max |onnxruntime - ddptrain predict| = {diff:.3g} over {logits.size} logits")
    if acc_ort != acc_eval:
        errors.append(f"onnxruntime on raw pixels: accuracy {acc_ort}, ddptrain eval {acc_eval}")
    if not diff <= TOL:
        errors.append(f"onnxruntime on raw pixels differs from predict by {diff:.3g} > {TOL}")

    export(job, sets, model, f"{tmp}/float.onnx", tmp, ["--onnx-input", "float"])
    itype, ops = input_type(f"{tmp}/float.onnx")
    x = (pixels.astype(np.float32) / np.float32(255.0) - np.float32(MEAN)) / np.float32(STD)
    sess = ort.InferenceSession(f"{tmp}/float.onnx", providers=["CPUExecutionProvider"])
    fdiff = float(np.max(np.abs(sess.run(["logits"], {"input": x})[0] - logits)))
    print(f"--onnx-input float: input {itype}, first node {ops[0]}, max diff {fdiff:.3g}")
    if itype != "FLOAT" or ops[0] == "Cast" or not fdiff <= TOL:
        errors.append(f"--onnx-input float: input {itype}, first node {ops[0]}, diff {fdiff:.3g}")

    fsets = sets + ["--set", f"data.file={float_copy(data, tmp)}"]
    log = export(job, fsets, model, f"{tmp}/f32.onnx", tmp)
    itype, _ = input_type(f"{tmp}/f32.onnx")
    if itype != "FLOAT" or "ONNX input: float32, as" not in log:
        errors.append(f"float32 data: default input {itype}, log:\n{log}")
    log = export(job, fsets, model, f"{tmp}/f32u8.onnx", tmp, ["--onnx-input", "uint8"], code=2)
    if "stores float32 images" not in log or os.path.exists(f"{tmp}/f32u8.onnx"):
        errors.append(f"float32 data with --onnx-input uint8 not refused as expected:\n{log}")
    log = export(job, sets, model, f"{tmp}/bad.onnx", tmp, ["--onnx-input", "int8"], code=2)
    if "expected uint8" not in log:
        errors.append(f"--onnx-input int8 not refused as expected:\n{log}")

    for e in errors:
        print("FAIL:", e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
