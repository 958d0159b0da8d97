#!/usr/bin/python3
"""The GPU table of the validate page (`ddptrain report VALIDATE.json`). On the GPU twin
(build/ddptrain-twin and its NVML, build/tests/twin/libnvidia-ml.so.1; that part is skipped
where the build has no twin): a clean `validate --quick` on one twin GPU gives one row with the
GPU's measurements as the JSON has them, PASS in both verdict cells; `validate --slurm-health`
on 2 twin GPUs with bad_devmem on the measured GPU and an XID on the other gives one row per
GPU (the second read by NVML only), each FAIL with its own reason and not the other's. Then
hostile files (members of the wrong type, NaN, rows that are not objects, 200,000 rows that all
match each other) must give a page (exit 0), never a crash, within seconds, the huge one cut to
its first rows with a note saying so."""
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from html.parser import HTMLParser

DDPTRAIN = os.environ.get("DDPTRAIN") or "build/ddptrain"
TWIN = os.environ.get("DDPTRAIN_TWIN") or os.path.join(os.path.dirname(DDPTRAIN), "ddptrain-twin")
BUILD = os.environ.get("DDP_BUILD") or os.path.dirname(DDPTRAIN)
SRC = os.environ.get("DDP_SRC") or "."
errors = []


def fail(msg):
    errors.append(msg)
    print("FAIL", msg)


class Tables(HTMLParser):
    """Every table after <h2>GPUs</h2> as rows of (class, [(cell class, text)])."""

    def __init__(self):
        super().__init__()
        self.in_gpus = self.in_h2 = False
        self.rows, self.row, self.cell, self.h2 = [], None, None, ""

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "h2":
            self.in_h2, self.h2 = True, ""
        elif tag == "tr" and self.in_gpus:
            self.row = (a.get("class") or "", [])
        elif tag in ("td", "th") and self.row is not None:
            self.cell = [a.get("class") or "", ""]
        elif tag == "br" and self.cell is not None:
            self.cell[1] += "\n"

    def handle_endtag(self, tag):
        if tag == "h2":
            self.in_h2 = False
            self.in_gpus = self.h2 == "GPUs"
        elif tag in ("td", "th") and self.cell is not None:
            self.row[1].append(tuple(self.cell))
            self.cell = None
        elif tag == "tr" and self.row is not None:
            self.rows.append(self.row)
            self.row = None

    def handle_data(self, data):
        if self.in_h2:
            self.h2 += data
        if self.cell is not None:
            self.cell[1] += data


def report(path, want_rc=0, limit=60):
    t = time.monotonic()
    p = subprocess.run([DDPTRAIN, "report", path, "-o", path + ".html"], capture_output=True,
                       text=True, timeout=limit)
    if p.returncode != want_rc:
        fail(f"report {os.path.basename(path)}: exit {p.returncode}, want {want_rc}: "
             f"{p.stderr.strip()[-300:]}")
        return None, time.monotonic() - t
    if want_rc:
        return None, time.monotonic() - t
    text = open(path + ".html").read()
    t_ = Tables()
    t_.feed(text)
    return (text, t_.rows), time.monotonic() - t


def fmt(x):
    """A rate or count as the page writes one below 10,000 (ddp_html_fmt_num)."""
    return "%.6g" % x if abs(x) < 1e4 else None


def check_twin(tmp):
    lib = os.path.join(BUILD, "tests", "twin")
    if not (os.access(TWIN, os.X_OK) and os.path.exists(os.path.join(lib, "libnvidia-ml.so.1"))):
        print(f"skip: no GPU twin ({TWIN}) or twin NVML in {lib}: twin part not run")
        return
    env = dict(os.environ, LD_LIBRARY_PATH=lib, DDP_EMU_GPUS="2")
    for k in ("DDP_EMU_NVML_FAULT", "DDP_TEST_VALIDATE_FAULT"):
        env.pop(k, None)
    cfg = os.path.join(SRC, "tests", "validate", "fast.ini")
    clean = os.path.join(tmp, "clean.json")
    p = subprocess.run([TWIN, "validate", "--quick", "--config", cfg, "--json", clean],
                       env=env, capture_output=True, text=True, timeout=120)
    if p.returncode not in (0, 6):
        fail(f"twin validate --quick: exit {p.returncode}: {p.stderr.strip()[-300:]}")
        return
    j = json.load(open(clean))
    out, _ = report(clean)
    if out:
        rows = [r for r in out[1] if r[1] and r[1][0][1] != "rank"]
        g = j["gpus"][0]
        if len(j["gpus"]) != 1 or len(rows) != 1:
            fail(f"clean: {len(j['gpus'])} gpus, {len(rows)} table rows, want 1 and 1")
        else:
            cells = [c[1] for c in rows[0][1]]
            want = [str(g["rank"]), g["host"], str(g["device"]), g["pci_bus_id"]] + [
                fmt(g[k]) for k in ("hbm_copy_gbs", "hbm_triad_gbs", "sgemm_tflops",
                                    "tf32_gemm_tflops", "bf16_gemm_tflops", "h2d_gbs", "d2h_gbs",
                                    "pattern_wrong_words")] + ["PASS", "PASS", ""]
            if cells != want:
                fail(f"clean row {cells}, want {want}")
            if [c[0] for c in rows[0][1][12:14]] != ["PASS", "PASS"] or rows[0][0] == "FAIL":
                fail(f"clean: verdict cells not styled PASS: {rows[0]}")
            print("ok   clean twin run: one GPU row, numbers as the JSON's, PASS")

    bad = os.path.join(tmp, "bad.json")
    env.update(DDP_EMU_NVML_FAULT="xid:79@1", DDP_TEST_VALIDATE_FAULT="bad_devmem:0")
    p = subprocess.run([TWIN, "validate", "--slurm-health", "--budget-s", "60", "--config", cfg,
                        "--json", bad], env=env, capture_output=True, text=True, timeout=120)
    if p.returncode != 1:
        fail(f"twin validate --slurm-health with faults: exit {p.returncode}, want 1")
        return
    j = json.load(open(bad))
    if len(j["gpus"]) != 1 or len(j["gpu_health"]) != 2:
        fail(f"faulty JSON: {len(j['gpus'])} gpus, {len(j['gpu_health'])} health rows")
        return
    out, _ = report(bad)
    if not out:
        return
    rows = [r for r in out[1] if r[1] and r[1][0][1] != "rank"]
    got = [(r[0], [c[1] for c in r[1][:4]], r[1][11][1], [c[0] for c in r[1][12:14]],
            r[1][14][1]) for r in rows]
    if len(got) != 2:
        fail(f"faulty: {len(got)} rows, want 2: {got}")
        return
    host = j["gpus"][0]["host"]
    (c0, id0, pat0, v0, why0), (c1, id1, pat1, v1, why1) = got
    if c0 != "FAIL" or id0 != ["0", host, "0", "00000000:00:00.0"] or pat0 != "3" or \
            v0 != ["FAIL", "PASS"] or not why0.startswith("gpu_mem: rank 0 on ") or "xid" in why0:
        fail(f"faulty GPU 0 row: {got[0]}")
    if c1 != "FAIL" or id1 != ["0", host, "1", "00000000:01:00.0"] or pat1 != "-" or \
            v1 != ["", "FAIL"] or why1 != f"gpu health: xid: 1 XID event during the run on GPU 1 " \
            f"(00000000:01:00.0) of {host}: XID 79":
        fail(f"faulty GPU 1 row (NVML only): {got[1]}")
    print("ok   --slurm-health twin run: GPU 0 gpu_mem, GPU 1 xid, each its own reason")


def write(tmp, name, obj, raw=None):
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        f.write(raw if raw is not None else json.dumps(obj))
    return path


def check_hostile(tmp):
    base = {"format": "ddptrain-validate-1", "verdict": "FAIL", "world_size": 2,
            "nodes_count": 1, "nodes": [], "ranks": []}
    odd = [
        dict(base, gpus="string", gpu_health=5, failures={}),
        dict(base, gpus={"rank": 0}, gpu_health=[[]], failures=[3, None, "x"]),
        dict(base, gpus=[1, "x", None, [], True,
                         {"rank": "zero", "device": {}, "hbm_copy_gbs": "fast", "verdict": 7,
                          "pci_bus_id": ["<b>"], "pattern_wrong_words": -1e300}],
             gpu_health=[{"rank": None, "cuda_device": [1, 2]},
                         {"rank": 0, "gpu": "x", "bus_id": 5, "reported": "no", "verdict": {}},
                         {"rank": 0, "cuda_device": 0, "reported": False, "status": None}],
             failures=[{"rank": 0, "check": 5, "reason": None}, {"rank": "0"}, 3,
                       {"rank": 0, "check": "gpu health", "reason": "GPU  (?) <script>"}]),
    ]
    for i, v in enumerate(odd):
        out, _ = report(write(tmp, f"odd{i}.json", v))
        if out and "<script>" in out[0]:
            fail(f"odd{i}: text not escaped")
    nan = json.dumps(dict(base, gpus=[{"rank": 0, "device": 0, "hbm_copy_gbs": 1.5}],
                          gpu_health=[{"rank": 0, "cuda_device": 0}],
                          failures=[{"rank": 0, "check": "gpu_hbm", "reason": "r"}]))
    nan = nan.replace('"rank": 0', '"rank": NaN').replace("1.5", "Infinity")
    report(write(tmp, "nan.json", None, nan))
    print("ok   wrong types, NaN and rows that are not objects: a page, no crash")

    n = 200000
    huge = dict(base, gpus=[{"rank": 0, "device": 0, "verdict": "FAIL"}] * n,
                gpu_health=[{"rank": 0, "cuda_device": 0, "gpu": 0, "bus_id": "b"}] * n,
                failures=[{"rank": 0, "check": "gpu health", "reason": "GPU 0 (b) x"}] * n)
    out, dt = report(write(tmp, "huge.json", huge), limit=120)
    if out:
        rows = [r for r in out[1] if r[1] and r[1][0][1] != "rank"]
        if len(rows) != 65536:
            fail(f"huge: {len(rows)} rows, want the first 65536")
        if not re.search(r'<p class="note">the first 65536 rows shown: the JSON has 200000 GPU '
                         r'and 200000 health entries', out[0]):
            fail("huge: no note about the rows not shown")
        if dt > 30:
            fail(f"huge: {dt:.1f} s")
        print(f"ok   {n} matching rows of each kind: the first 65536 shown ({dt:.1f} s)")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        check_twin(tmp)
        check_hostile(tmp)
    print(f"report-validate-gpus: {len(errors)} failures")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
