#!/usr/bin/python3
"""Numbers a person reads on report.html and on the validate page, from metrics.jsonl files
written by hand: every axis tick is a round number (a 1, 2 or 5 step, k/M for thousands and
millions), the learning rate's axis does not go below zero, no number is written as 1.7964e+09
or 1.04858e+06 (dates are ISO dates, sizes KiB/MiB, large counts have thousands separators),
every SVG coordinate is a finite number inside the chart's viewBox, text stays inside it, a
legend names only the series that have points, and overlaid runs are named by the short part
of their directories. A loss of -1e308, 1e308, 1e999 (inf), NaN or null is not drawn: the chart
says how many values it left out and names the first one's line. A line over 1 MiB is refused
with its own line number."""
import json
import os
import re
import subprocess
import sys
import tempfile
from html.parser import HTMLParser

DDPTRAIN = os.environ.get("DDPTRAIN") or "build/ddptrain"
VIEW_W, VIEW_H = 640, 276
CHAR_PX = 6.2  # the widest a character of a 10px label is drawn (digits are about 5.6)
errors = []


def fail(msg):
    errors.append(msg)
    print("FAIL", msg)


def ok(msg, before):
    """Print ok for a part of the test that added no failure to the `before` ones."""
    if len(errors) == before:
        print("ok  ", msg)


def run_dir(path, records, raw_lines=()):
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "metrics.jsonl"), "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
        for line in raw_lines:
            f.write(line + "\n")
    return path


def records(steps=1200, log_every=20, samples=1.23e6, lr0=0.1):
    """A run as ddptrain writes it: a start, train records (cosine lr down to exactly 0),
    an evaluation per epoch of 400 steps, a summary."""
    import math
    out = [{"kind": "start", "epoch": 1, "step": 0, "version": "0.1.0", "launcher": "mpirun",
            "comm": "mpi", "device": "cpu", "threads": 1, "hosts": ["n1", "n2"],
            "time": 1796400000.25, "world_size": 2, "resumed": False}]
    for s in range(log_every, steps + 1, log_every):
        out.append({"kind": "train", "epoch": 1 + (s - 1) // 400, "step": s,
                    "loss": 2.3 * math.exp(-s / 300) + 0.2, "acc": 0.9 - 0.8 * math.exp(-s / 200),
                    "lr": lr0 * 0.5 * (1 + math.cos(math.pi * s / steps)),
                    "samples_per_s": samples * (1 + 0.01 * (s % 7))})
        if s % 400 == 0:
            out.append({"kind": "eval", "epoch": s // 400, "step": s,
                        "test_loss": 2.0 * math.exp(-s / 300) + 0.3, "test_acc": 0.8})
    out.append({"kind": "summary", "epochs": 3, "steps": steps, "world_size": 2,
                "global_batch": 32768, "params": 1048576, "train_s": 123456.7,
                "samples_per_s": samples, "test_loss": 0.31, "test_acc": 0.8})
    return out


def report(args, cwd, want_rc=0):
    r = subprocess.run([DDPTRAIN, "report"] + args, cwd=cwd, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=60)
    if r.returncode != want_rc:
        fail(f"ddptrain report {' '.join(args)} exited {r.returncode}, want {want_rc}: "
             f"{r.stdout.strip()}")
    return r.stdout


class Page(HTMLParser):
    """The charts of a page: each with its ticks, coordinates, texts, polylines, legend."""

    def __init__(self):
        super().__init__()
        self.charts, self.caption, self.in_cap, self.text_attrs = [], "", False, None
        self.notes, self.in_note = [], False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "figcaption":
            self.in_cap, self.caption = True, ""
        elif tag == "svg" and a.get("class") == "chart":
            self.charts.append({"title": self.caption, "svg": a, "ticks": {"xt": [], "yt": []},
                                "coords": [], "texts": [], "series": [], "legend": []})
        elif tag == "span" and "data-kind" in a and self.charts:
            self.charts[-1]["legend"].append((a["data-run"], a["data-kind"], a["data-field"]))
        elif tag == "p" and a.get("class") == "note":
            self.in_note = True
            self.notes.append([self.caption, ""])
        if not self.charts or tag in ("svg",) or "legend" in str(a.get("class")):
            return
        c = self.charts[-1]
        for k in ("x", "y", "x1", "y1", "x2", "y2", "cx", "cy", "width", "height"):
            if k in a and tag != "svg":
                c["coords"].append((tag, k, a[k]))
        if tag == "polyline":
            c["series"].append((a["data-run"], a["data-kind"], a["data-field"]))
            for xy in a["points"].split():
                for v in xy.split(","):
                    c["coords"].append(("polyline", "points", v))
        if tag == "text":
            self.text_attrs = a

    def handle_endtag(self, tag):
        if tag == "figcaption":
            self.in_cap = False
        if tag == "p":
            self.in_note = False

    def handle_data(self, data):
        if self.in_cap:
            self.caption += data
        if self.in_note:
            self.notes[-1][1] += data
        if self.text_attrs is not None and self.charts:
            a, c = self.text_attrs, self.charts[-1]
            c["texts"].append((a, data))
            if a.get("class") in c["ticks"]:
                c["ticks"][a["class"]].append(data)
            self.text_attrs = None


def parse(path):
    p = Page()
    with open(path, encoding="utf-8") as f:
        html = f.read()
    p.feed(html)
    return html, p


SUFFIX = {"": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}


def tick_value(label):
    """The number a tick says: plain digits with a k/M/G/T suffix, never an exponent."""
    m = re.fullmatch(r"(-?[0-9]+(?:\.[0-9]+)?)([kMGT]?)", label)
    return None if not m else float(m.group(1)) * SUFFIX[m.group(2)]


def title_factor(title):
    """The factor a chart's title names for its value axis, "loss (x1e-5)": 1e-5; else 1."""
    m = re.search(r" \(x1e(-[0-9]+)\)$", title)
    return 10.0 ** int(m.group(1)) if m else 1.0


def is_round_step(step):
    """1, 2 or 5 times a power of ten."""
    import math
    e = math.floor(math.log10(step))
    m = step / 10 ** e
    return any(abs(m - r) < 1e-6 for r in (1, 2, 5, 10))


def check_ticks(c, where):
    for cls, labels in c["ticks"].items():
        vals = [tick_value(t) for t in labels]
        if None in vals or len(vals) < 3:
            fail(f"{where} {c['title']}: {cls} tick labels {labels} are not round numbers")
            continue
        long = [t for t, v in zip(labels, vals) if abs(v) < 1 and len(t.lstrip("-")) > 6]
        if long:
            fail(f"{where} {c['title']}: {cls} tick labels {long} are over 6 characters; "
                 f"scale the axis and name the factor in the title")
        if cls == "yt" and title_factor(c["title"]) != 1:
            f = title_factor(c["title"])
            lo, hi = float(c["svg"]["data-y0"]), float(c["svg"]["data-y1"])
            if abs(vals[0] * f - lo) > 1e-9 * abs(f) or abs(vals[-1] * f - hi) > 1e-9 * abs(f):
                fail(f"{where} {c['title']}: ticks {labels} times {f} are not the axis "
                     f"{lo}..{hi}")
        step = vals[1] - vals[0]
        ok = step > 0 and is_round_step(step)
        for i, v in enumerate(vals):
            if abs(v - (vals[0] + i * step)) > 1e-6 * max(abs(step), 1e-300) * 10 or \
                    abs(v / step - round(v / step)) > 1e-6:
                ok = False
        if not ok:
            fail(f"{where} {c['title']}: {cls} ticks {labels} are not multiples of a 1-2-5 step")


def check_geometry(c, where):
    """Every coordinate a finite number inside the viewBox; every text inside it too."""
    for tag, k, v in c["coords"]:
        try:
            x = float(v)
        except ValueError:
            x = float("nan")
        lim = VIEW_H if k in ("y", "y1", "y2", "cy", "height") else VIEW_W
        if x != x or x in (float("inf"), float("-inf")):
            fail(f"{where} {c['title']}: <{tag} {k}=\"{v}\">: not a finite coordinate")
            return
        if not 0 <= x <= lim:
            fail(f"{where} {c['title']}: <{tag} {k}=\"{v}\"> outside the viewBox 0..{lim}")
            return
    for a, text in c["texts"]:
        cls = a.get("class", "")
        x, w = float(a["x"]), len(text) * CHAR_PX
        lo = x - w if cls == "yt" or cls.endswith(" end") else \
            x - w / 2 if cls in ("xt", "xl") else x
        if lo < 0 or lo + w > VIEW_W:
            fail(f"{where} {c['title']}: text '{text}' at x={x} ({cls}) is cut off")


def check_page(path, where, expect_legend=None):
    html, p = parse(path)
    if "e+" in re.sub(r"<[^>]*>", "", html):
        m = re.search(r"[^<>\s]*e\+[^<>\s]*", re.sub(r"<[^>]*>", " ", html))
        fail(f"{where}: a number with an exponent: '{m.group(0)}'")
    for c in p.charts:
        check_ticks(c, where)
        check_geometry(c, where)
        if sorted(set(c["legend"])) != sorted(set(c["series"])) or \
                len(c["legend"]) != len(set(c["legend"])):
            fail(f"{where} {c['title']}: legend {c['legend']} but series {c['series']}")
    return html, p


def main():
    tmp = tempfile.mkdtemp()
    n = 0
    recs = records()
    a = run_dir(os.path.join(tmp, "a"), recs)
    report(["a"], tmp)
    html, p = check_page(os.path.join(a, "report.html"), "report.html")
    if len(p.charts) != 4:
        fail(f"{len(p.charts)} charts, want loss, accuracy, learning rate, samples/s")
    for c in p.charts:
        if c["title"].startswith("learning rate"):
            if float(c["svg"]["data-y0"]) < 0 or any(t.startswith("-") for t in c["ticks"]["yt"]):
                fail(f"learning rate axis goes below zero: {c['ticks']['yt']}")
        if c["title"] == "loss" and {s[1] for s in c["legend"]} != {"train", "eval"}:
            fail(f"loss legend {c['legend']}: want train and test only (no val)")
    for want in ("2026-12-04T16:00:00Z", "<td>1,048,576</td>", "<td>32,768</td>",
                 "<td>1,230,000</td>", "<td>123,457</td>"):
        if want not in html:
            fail(f"report.html lacks {want}")
    ok(f"one run: {len(p.charts)} charts checked", n)
    n = len(errors)

    # hostile values: not drawn, counted, the first one's line named
    bad = records()
    bad.insert(5, {"kind": "train", "epoch": 1, "step": 90, "loss": -1e308, "acc": 0.5,
                   "lr": 0.1, "samples_per_s": 1e308})
    bad.insert(9, {"kind": "train", "epoch": 1, "step": 150, "loss": 1e308, "acc": None,
                   "lr": None, "samples_per_s": 1000})
    bad.insert(12, {"kind": "train", "epoch": 1, "step": 230, "loss": float("nan"), "acc": 0.5,
                    "lr": 0.1, "samples_per_s": 1000})  # NaN, as Python's json writes it
    b = run_dir(os.path.join(tmp, "b"), bad,
                ['{"kind":"train","epoch":3,"step":1201,"loss":1e999,"acc":0.5,"lr":0,'
                 '"samples_per_s":1000}'])
    report(["b"], tmp)
    html, p = check_page(os.path.join(b, "report.html"), "hostile report.html")
    notes = {cap: text for cap, text in p.notes}
    want = {"loss": "4 values not drawn", "accuracy": "1 value not drawn",
            "learning rate": "1 value not drawn", "samples/s (all ranks)": "1 value not drawn"}
    for cap, w in want.items():
        if w not in notes.get(cap, ""):
            fail(f"hostile: chart '{cap}' note {notes.get(cap)!r}, want '{w}'")
    if "line 6 of metrics.jsonl" not in notes.get("loss", ""):
        fail(f"hostile: the loss note does not name line 6: {notes.get('loss')!r}")
    if len(p.charts) != 4:
        fail(f"hostile: {len(p.charts)} charts drawn, want 4")
    ok(f"hostile values: notes {sorted(notes)}", n)
    n = len(errors)

    # an overlay of a sweep: runs named by what differs, briefly
    for name, lr in (("lr0.1", 0.1), ("lr0.01", 0.01)):
        run_dir(os.path.join(tmp, "sweep", "2026-12-05", name), records(lr0=lr))
    report(["sweep/2026-12-05/lr0.1/", "sweep/2026-12-05/lr0.01", "-o", "s.html"], tmp)
    html, p = check_page(os.path.join(tmp, "s.html"), "overlay")
    legend = re.findall(r'<span data-run[^>]*>.*?</svg> ([^<]*)</span>', html)
    if "lr0.1: train" not in legend or "lr0.01: test" not in legend or \
            any("sweep" in e for e in legend):
        fail(f"overlay legend {legend[:6]}: want 'lr0.1: train', 'lr0.01: test'")
    run_dir(os.path.join(tmp, "x", "seed1"), recs)
    run_dir(os.path.join(tmp, "y", "seed1"), recs)
    report(["x/seed1", "y/seed1", "-o", "t.html"], tmp)
    legend = re.findall(r'</svg> ([^<]*)</span>', open(os.path.join(tmp, "t.html")).read())
    if "x/seed1: train" not in legend or "y/seed1: train" not in legend:
        fail(f"two runs named seed1: legend {legend[:4]}")
    ok("overlays named briefly", n)
    n = len(errors)

    # small and large scales: ticks stay round and short
    for name, kw in (("tiny", {"lr0": 3e-5, "samples": 12.5}),
                     ("long", {"steps": 2_400_000, "log_every": 20000, "samples": 3e9})):
        d = run_dir(os.path.join(tmp, name), records(**kw))
        report([name], tmp)
        check_page(os.path.join(d, "report.html"), name)
    ok("tiny and huge scales", n)
    n = len(errors)

    # learning rates of 1e-5 to 1e-3: short plain decimals, or a factor named in the title
    for lr0, title, ticks in ((5e-5, "learning rate (x1e-5)", ["0", "1", "2", "3", "4", "5"]),
                              (3e-5, "learning rate (x1e-5)", ["0", "0.5", "1.0", "1.5",
                                                               "2.0", "2.5", "3.0"]),
                              (2e-4, "learning rate (x1e-4)", ["0", "0.5", "1.0", "1.5",
                                                               "2.0"]),
                              (1e-3, "learning rate", ["0", "0.0002", "0.0004", "0.0006",
                                                       "0.0008", "0.0010"])):
        name = f"lr{lr0:g}"
        d = run_dir(os.path.join(tmp, name), records(lr0=lr0))
        report([name], tmp)
        html, p = check_page(os.path.join(d, "report.html"), name)
        lr = [c for c in p.charts if c["title"].startswith("learning rate")]
        if not lr or lr[0]["title"] != title or lr[0]["ticks"]["yt"] != ticks:
            got = (lr[0]["title"], lr[0]["ticks"]["yt"]) if lr else None
            fail(f"lr from {lr0:g}: chart {got}, want {title!r} with ticks {ticks}")
        if re.search(r'class="yt">[^<]*e-', html):
            fail(f"lr from {lr0:g}: a tick with an exponent")
    ok("small learning rates: ticks 0.0002 or scaled with the factor in the title", n)
    n = len(errors)

    # strtod's -nan is not JSON: refused with its line
    n = len(errors)
    run_dir(os.path.join(tmp, "minus-nan"), recs[:2], ['{"kind":"train","step":50,"loss":-nan}'])
    out = report(["minus-nan"], tmp, want_rc=3)
    if "minus-nan/metrics.jsonl:3: not a metrics record" not in out:
        fail(f"-nan on line 3: {out.strip()[:200]}")
    ok("-nan (not JSON) refused at its line", n)

    # a line over 1 MiB: refused with its own line number
    d = os.path.join(tmp, "long-line")
    run_dir(d, recs[:3], ['{"kind":"train","pad":"' + "x" * (1 << 21) + '"}', json.dumps(recs[3])])
    out = report(["long-line"], tmp, want_rc=3)
    if "long-line/metrics.jsonl:4: line longer than 1 MiB" not in out:
        fail(f"a 2 MiB line 4: {out.strip()[:200]}")
    ok("a line over 1 MiB is refused at line 4", n)
    n = len(errors)

    # the validate page: sizes in KiB/MiB, counts with separators
    v = {"format": "ddptrain-validate-1", "verdict": "PASS", "world_size": 2, "nodes_count": 1,
         "launcher": "mpirun", "comm": "mpi",
         "nodes": [{"host": "n1", "ranks": [0, 1], "verdict": "PASS", "reasons": []}],
         "ranks": [{"rank": r, "host": "n1", "cpu_model": "x", "threads": 8, "gpu_count": 0,
                    "gemm_gflops": 123456.78, "gemm_ratio": 1.0, "triad_gbs": 25.5,
                    "triad_ratio": 1.0, "verdict": "PASS"} for r in (0, 1)],
         "allreduce": {"measured": True, "rows": [
             {"bytes": b, "time_us": t, "algbw_gbs": 1.5, "busbw_gbs": 1.5, "wrong_elements": 0}
             for b, t in ((4096, 12.5), (1048576, 1234567.0), (268435456, 2.5e7))]}}
    with open(os.path.join(tmp, "v.json"), "w") as f:
        json.dump(v, f)
    report(["v.json"], tmp)
    html = open(os.path.join(tmp, "v.html")).read()
    for want in ("<td>4 KiB</td>", "<td>1 MiB</td>", "<td>256 MiB</td>", "<td>1,234,567</td>",
                 "<td>25,000,000</td>", "<td>123,457</td>"):
        if want not in html:
            fail(f"v.html lacks {want}")
    if re.search(r"[0-9]e\+", html):
        fail("v.html has a number with an exponent")
    ok("validate page numbers", n)
    n = len(errors)

    print(f"report-numbers: {len(errors)} failures")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
