#!/usr/bin/env python3
"""bench_table.py W R DRY - the benchmark table of tests/gpu/device-check.sh.

Reads the runs the bench stage left in W: ddptrain's W/ddp-<model>-<batch>-<precision>-graph<on|off>/
metrics.jsonl and its log W/ddp-....log (the "convolutions:" line names the convolution path and
whether cuDNN's algorithms were deterministic), PyTorch's W/torch-<model>-<batch>.json
(tests/gpu/torch_gpu_bench.py). Writes R/bench.md (the table, ready for bench/RESULTS-gpu.md) and
R/bench.json (its rows); prints how many figures were measured. Exit 1 when none was.

samples/s: ddptrain the median of its logged rates after the first log interval (the warm-up);
PyTorch timed after its warm-up. ddptrain / PyTorch uses the faster of graph off and on.
"""
import glob
import json
import os
import re
import statistics
import sys

MODELS = {"cifar-resnet18": "ResNet-18 3x32x32", "fashion-cnn": "CNN (fashion-cnn)",
          "fashion-mlp": "MLP 784-512-512-10"}
PRECISIONS = ("fp32", "tf32", "bf16")
# device-check.sh ddp_run's variants: "" (the defaults), nd ([train] deterministic = false),
# nchw ([train] layout = nchw), nd-nchw, f32a ([train] activations = fp32), leg ([train]
# cudnn_api = legacy)
VARIANTS = ("", "nd", "nchw", "nd-nchw", "f32a", "leg")


def conv_path(log):
    """A short name of the convolution path from a run's log: 'cuDNN det', 'cuDNN any',
    'im2col' or '' (no convolution, or the line is missing); ' NHWC' after a cuDNN path whose
    activations were channels-last ([train] layout), ' bf16a' where they were stored as bf16
    ([train] activations), ' legacy' where cuDNN's graph API was not timed ([train] cudnn_api
    = legacy, or the graph API unavailable)."""
    try:
        text = open(log, errors="replace").read()
    except OSError:
        return ""
    m = re.search(r"convolutions: (.*)", text)
    if not m or ("cuDNN" in m.group(1) and "  conv C" not in text):
        return ""  # no convolution (cuDNN loaded, no layer planned), or no such line
    line = m.group(1)
    if line.startswith("cuDNN") and "im2col" not in line:
        nhwc = " NHWC" if "channels-last" in line else ""
        nhwc += " bf16a" if "stored as bf16" in line else ""
        nhwc += " legacy" if "legacy API" in line and "graph and legacy" not in line else ""
        return ("cuDNN any" if "deterministic or not" in line else "cuDNN det") + nhwc
    return "im2col"


def ddp(W, model, b, prec, graph, variant=""):
    base = os.path.join(W, f"ddp-{model}-{b}-{prec}-graph{graph}" + (f"-{variant}" if variant else ""))
    try:
        recs = [json.loads(l) for l in open(os.path.join(base, "metrics.jsonl"))]
    except (OSError, ValueError):
        return None
    rates = [r["samples_per_s"] for r in recs if r.get("kind") == "train"][1:]
    summ = [r for r in recs if r.get("kind") == "summary"]
    return dict(rate=statistics.median(rates) if rates else None,
                mem=summ[-1].get("gpu_mem_peak_bytes") if summ else None,
                path=conv_path(base + ".log"))


def torch_result(W, model, b, mode, prec):
    try:
        runs = json.load(open(os.path.join(W, f"torch-{model}-{b}.json")))
    except (OSError, ValueError):
        return None
    r = next((x for x in runs if x.get("mode") == mode and x.get("precision") == prec), None)
    if r is None or "skipped" in r:
        return None
    return dict(rate=r.get("samples_per_s"), mem=r.get("peak_mem_bytes"))


def rows_of(W):
    found = set()
    for d in glob.glob(os.path.join(W, "ddp-*-graph*")) + glob.glob(os.path.join(W, "torch-*.json")):
        m = re.match(r"(?:ddp|torch)-(.+?)-(\d+)(?:-|\.json)", os.path.basename(d))
        if m and m.group(1) in MODELS:
            found.add((m.group(1), int(m.group(2))))
    order = list(MODELS)
    rows = []
    for model, b in sorted(found, key=lambda x: (order.index(x[0]), x[1])):
        for prec, variant in [(p, v) for p in PRECISIONS for v in VARIANTS]:
            off, on = ddp(W, model, b, prec, "off", variant), ddp(W, model, b, prec, "on", variant)
            if variant and not (off or on):
                continue
            nd = "nd" in variant
            eager = torch_result(W, model, b, "eager", prec)
            comp = torch_result(W, model, b, "compile", prec)
            rate = lambda x: x and x.get("rate")
            best = max([v for v in (rate(off), rate(on)) if v], default=None)
            if best is None and not rate(eager) and not rate(comp):
                continue
            rows.append(dict(model=model, batch=b, precision=prec, deterministic=not nd,
                             conv=(on or off or {}).get("path", ""),
                             ddp_graph_off=rate(off), ddp_graph_on=rate(on),
                             torch_eager=rate(eager), torch_compile=rate(comp),
                             over_eager=best / rate(eager) if best and rate(eager) else None,
                             over_compile=best / rate(comp) if best and rate(comp) else None,
                             mem_ddp=max([x["mem"] for x in (off, on) if x and x.get("mem")],
                                         default=None),
                             mem_eager=eager and eager.get("mem"), mem_compile=comp and comp.get("mem")))
    return rows


def versions(W):
    """'Device: NAME; PyTorch VERSION.' from PyTorch's results."""
    tj = [t for p in glob.glob(os.path.join(W, "torch-*.json")) for t in json.load(open(p))]
    dev = next((t.get("device") for t in tj if t.get("device")), "?")
    tv = next((t.get("torch") for t in tj if t.get("torch")), "?")
    return f"Device: {dev}; PyTorch {tv}."


def table(rows, dry, W):
    f0 = lambda v: "-" if v is None else f"{v:,.0f}"
    f2 = lambda v: "-" if v is None else f"{v:.2f}x"
    mib = lambda v: "-" if v is None else f"{v / 1048576:.1f}"
    head = ["samples/s: ddptrain the median of its logged rates after the first log interval; "
            "PyTorch timed after its warm-up, data preloaded on the device (channels_last under "
            "bf16 for convolutional models). ddptrain / PyTorch: the faster of graph off and on. "
            "conv: ddptrain's convolution path (cuDNN det = the fastest measured of cuDNN's "
            "deterministic algorithms, the default; cuDNN any = the fastest measured, "
            "deterministic or not: [train] deterministic = false; NHWC = channels-last "
            "activations, [train] layout = auto under tf32 and bf16; bf16a = activations "
            "stored as bf16, [train] activations = auto under bf16; legacy = cuDNN's legacy "
            "API only, [train] cudnn_api = legacy, where the default also times the graph "
            "API's engines). Peak MiB: device memory allocated by the framework (ddptrain "
            "gpu_mem_peak_bytes; torch.cuda.max_memory_allocated less the preloaded data); "
            "- = not run."]
    head.insert(0, versions(W))
    if dry:
        head.insert(0, "DRY RUN: the GPU twin and CPU PyTorch, tiny step counts: these numbers "
                       "mean nothing.")
    lines = ["| model | batch | precision | conv | ddptrain graph off | ddptrain graph on "
             "| PyTorch eager | torch.compile | ddptrain / eager | ddptrain / compile "
             "| peak MiB ddptrain | peak MiB eager | peak MiB compile |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {MODELS[r['model']]} | {r['batch']} | {r['precision']} | "
                     f"{r['conv'] or '-'} | "
                     f"{f0(r['ddp_graph_off'])} | {f0(r['ddp_graph_on'])} | "
                     f"{f0(r['torch_eager'])} | {f0(r['torch_compile'])} | "
                     f"{f2(r['over_eager'])} | {f2(r['over_compile'])} | {mib(r['mem_ddp'])} | "
                     f"{mib(r['mem_eager'])} | {mib(r['mem_compile'])} |")
    return "\n".join(head + [""] + lines) + "\n"


def main():
    W, R, dry = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
    rows = rows_of(W)
    open(os.path.join(R, "bench.md"), "w").write(table(rows, dry, W))
    json.dump(rows, open(os.path.join(R, "bench.json"), "w"), indent=1)
    measured = sum(1 for r in rows for k in ("ddp_graph_off", "ddp_graph_on", "torch_eager") if r[k])
    print(f"{measured} figures measured")
    return 0 if measured else 1


if __name__ == "__main__":
    sys.exit(main())
