#!/usr/bin/python3
"""report.html's curves are metrics.jsonl's numbers: a run is preempted (SIGUSR1, exit 75) and
resumed, rank 0 writes report.html at the end; every <polyline> of every chart, mapped back
through the chart's axes, must equal the records of metrics.jsonl in order (to the SVG's
0.001 px), the preemption and the resume must be marked at their steps, the page must hold no
script and fetch nothing, `ddptrain report A B` must overlay a second run (data-run=1), and
`ddptrain report V.json` must render `validate --json` as a node and rank table. The second
run holds out a validation share: its val_loss and val_acc are series of the loss and accuracy
charts too (data-kind="val"), checked like the others."""
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import seelib  # noqa: E402

JOB = """[job]
output = {out}
[data]
file = d.h5
batch_size = 16
[model]
layers = flatten, linear(32), relu, linear(4)
[optim]
schedule = cosine
[train]
epochs = {epochs}
log_every = 3
[checkpoint]
every_epochs = 0
"""

FIELDS = {"train": ["loss", "acc", "lr", "samples_per_s"], "eval": ["test_loss", "test_acc"]}


def check_series(chart, series, recs, errors):
    kind, field, run = series["data-kind"], series["data-field"], series["data-run"]
    want = [(r["step"], r[field]) for r in recs[int(run)]
            if r["kind"] == kind and r.get(field) is not None]
    got = seelib.points(chart, series)
    tx, ty = seelib.tolerance(chart)
    if len(got) != len(want):
        errors.append(f"{chart['title']}: run {run} {kind}.{field}: {len(got)} points, "
                      f"metrics.jsonl has {len(want)}")
        return 0
    for (gs, gv), (ws, wv) in zip(got, want):
        if abs(gs - ws) > tx or abs(gv - wv) > ty:
            errors.append(f"{chart['title']}: run {run} {kind}.{field}: point ({gs:.4f}, "
                          f"{gv:.6g}) but metrics.jsonl has ({ws}, {wv})")
            return 0
    return len(got)


def main():
    tmp = tempfile.mkdtemp()
    seelib.run(["data", "synth", "-o", "d.h5", "--shape", "1,8,8", "--classes", "4", "--train",
                "4096", "--test", "256", "--seed", "5"], tmp)
    with open(os.path.join(tmp, "a.ini"), "w") as f:
        f.write(JOB.format(out="a", epochs=400))
    with open(os.path.join(tmp, "b.ini"), "w") as f:
        f.write(JOB.format(out="b", epochs=2))
    rc = seelib.train_until_logged(["a.ini", "--set", "train.threads=1"], tmp, 4)
    if rc != 75:
        sys.exit(f"FAIL: the preempted run exited {rc}, want 75")
    recs_a = seelib.metrics(os.path.join(tmp, "a"))
    stop = [r for r in recs_a if r["kind"] == "stop"]
    if not stop:
        sys.exit("FAIL: no stop record after SIGUSR1")
    more = str(stop[0]["step"] + 600)  # past the first epoch boundary
    seelib.run(["a.ini", "--set", "train.max_steps=" + more, "--set", "train.threads=1"], tmp)
    seelib.run(["b.ini", "--set", "train.threads=1", "--set", "data.val_fraction=0.1"], tmp)
    recs = [seelib.metrics(os.path.join(tmp, d)) for d in ("a", "b")]
    starts = [r for r in recs[0] if r["kind"] == "start"]
    if [s["resumed"] for s in starts] != [False, True]:
        sys.exit(f"FAIL: start records {starts}")
    if not all("acc" in r for r in recs[0] if r["kind"] == "train"):
        sys.exit("FAIL: train records without acc")

    errors, checked = [], 0
    html = open(os.path.join(tmp, "a", "report.html")).read()
    if re.search(r"<script|https?://(?!www\.w3\.org/2000/svg)", html):
        errors.append("report.html has a script or an external address")
    charts = seelib.parse_report(os.path.join(tmp, "a", "report.html"))
    titles = [c["title"] for c in charts]
    for want in ("loss", "accuracy", "learning rate", "samples/s (all ranks)"):
        if want not in titles:
            errors.append(f"no chart '{want}' (charts: {titles})")
    for c in charts:
        for s in c["series"]:
            checked += check_series(c, s, recs, errors)
        m = c["map"]
        def px(step):
            return m["left"] + (step - m["x0"]) / (m["x1"] - m["x0"]) * (m["right"] - m["left"])
        for cls, step in (("stop", stop[0]["step"]), ("resume", starts[1]["step"])):
            if not any(k == cls and abs(x - px(step)) < 0.1 for k, x in c["markers"]):
                errors.append(f"{c['title']}: no {cls} marker at step {step}")
        if not any(k == "epoch" for k, _ in c["markers"]):
            errors.append(f"{c['title']}: no epoch boundary marked")

    seelib.run(["report", "a", "b", "-o", "sweep.html"], tmp)
    sweep = seelib.parse_report(os.path.join(tmp, "sweep.html"))
    runs = {s["data-run"] for c in sweep for s in c["series"]}
    if runs != {"0", "1"}:
        errors.append(f"overlay of two runs has series of runs {sorted(runs)}")
    val = {(c["title"], s["data-field"]) for c in sweep for s in c["series"]
           if s["data-kind"] == "val" and s["data-run"] == "1"}
    if val != {("loss", "val_loss"), ("accuracy", "val_acc")}:
        errors.append(f"the validation series of run b: {sorted(val)}")
    for c in sweep:
        for s in c["series"]:
            checked += check_series(c, s, recs, errors)
    # `validate --json` through the same command: one row per node and per rank
    v = seelib.run(["validate", "--quick", "--json", "v.json"], tmp, check=False)
    if v.returncode in (0, 1):
        seelib.run(["report", "v.json"], tmp)
        page = open(os.path.join(tmp, "v.html")).read()
        vj = __import__("json").load(open(os.path.join(tmp, "v.json")))
        for r in vj["ranks"]:
            if f"<td>{r['rank']}</td><td>{r['host']}</td>" not in page:
                errors.append(f"v.html lacks the row of rank {r['rank']}")
        if "<h2>nodes</h2>" not in page or vj["nodes"][0]["host"] not in page:
            errors.append("v.html has no node table")
    else:
        errors.append(f"ddptrain validate --quick exited {v.returncode}")

    for e in errors:
        print("FAIL:", e)
    print(f"report-svg: {checked} points checked against metrics.jsonl, {len(errors)} errors")
    return 1 if errors or checked < 100 else 0


if __name__ == "__main__":
    sys.exit(main())
