"""Helpers shared by the tests of the report, TensorBoard, check and ONNX export."""
import json
import os
import shutil
import signal
import subprocess
import sys
from html.parser import HTMLParser

IDX_DIR = "/usr/share/datasets/fashion-mnist"


def ddptrain():
    return os.environ.get("DDPTRAIN") or os.path.join(os.environ.get("DDP_SRC", "."), "build",
                                                      "ddptrain")


def src():
    return os.environ.get("DDP_SRC") or os.path.join(os.path.dirname(__file__), "..", "..")


def run(args, cwd, timeout=300, check=True):
    r = subprocess.run([ddptrain()] + args, cwd=cwd, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=timeout)
    if check and r.returncode != 0:
        sys.exit(f"FAIL: ddptrain {' '.join(args)} exited {r.returncode}:\n{r.stderr}")
    return r


def fashion_mnist(tmp):
    """The real Fashion-MNIST as HDF5: the checkout's, else imported from the Debian package."""
    path = os.path.join(src(), "datasets", "fashion-mnist.h5")
    if os.path.exists(path):
        return os.path.abspath(path)
    path = os.path.join(tmp, "fashion-mnist.h5")
    run(["data", "idx", "--dir", IDX_DIR, "-o", path], tmp, timeout=600)
    return path


def venv_python_or_skip(modules):
    """Re-run this script under tools/pyvenv.sh's python unless `modules` import here."""
    try:
        for m in modules:
            __import__(m)
        return
    except ImportError:
        pass
    if os.environ.get("DDP_IN_PYVENV"):
        sys.exit(f"FAIL: {modules} missing even in the test venv")
    r = subprocess.run([os.path.join(src(), "tools", "pyvenv.sh")], stdout=subprocess.PIPE,
                       text=True)
    if r.returncode != 0:
        print(f"SKIP: cannot install {modules} (tools/pyvenv.sh exit {r.returncode})")
        sys.exit(77)
    env = dict(os.environ, DDP_IN_PYVENV="1")
    os.execve(r.stdout.strip(), [r.stdout.strip()] + sys.argv, env)


def metrics(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def train_until_logged(args, cwd, lines, deadline=120):
    """Start a training, wait on its stdout pipe for `lines` progress lines, send SIGUSR1 and
    return its exit code (it saves a checkpoint at the next step and exits 75)."""
    p = subprocess.Popen([ddptrain()] + args, cwd=cwd, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    seen = 0
    timer = __import__("threading").Timer(deadline, p.kill)
    timer.start()
    try:
        for line in p.stdout:
            if " step " in line and " loss " in line:
                seen += 1
                if seen == lines:
                    p.send_signal(signal.SIGUSR1)
        return p.wait()
    finally:
        timer.cancel()


class Charts(HTMLParser):
    """Every <svg class="chart"> of report.html with its mapping and its polylines."""

    def __init__(self):
        super().__init__()
        self.charts, self.lines, self.caption, self._cap = [], [], [], False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "figcaption":
            self._cap = True
        if tag == "svg" and a.get("class") == "chart":
            self.charts.append({"map": {k[5:]: float(v) for k, v in a.items()
                                        if k.startswith("data-")},
                                "series": [], "markers": [], "title": self.caption[-1]})
        if tag == "polyline" and "series" in a.get("class", ""):
            self.charts[-1]["series"].append(a)
        if tag == "line" and a.get("class") in ("resume", "stop", "epoch") and self.charts:
            self.charts[-1]["markers"].append((a["class"], float(a["x1"])))

    def handle_data(self, data):
        if self._cap:
            self.caption.append(data)
            self._cap = False


def parse_report(path):
    p = Charts()
    with open(path) as f:
        p.feed(f.read())
    return p.charts


def points(chart, series):
    """A polyline's points mapped back to (step, value)."""
    m = chart["map"]
    out = []
    for xy in series["points"].split():
        x, y = (float(v) for v in xy.split(","))
        step = m["x0"] + (x - m["left"]) / (m["right"] - m["left"]) * (m["x1"] - m["x0"])
        val = m["y0"] + (m["bottom"] - y) / (m["bottom"] - m["top"]) * (m["y1"] - m["y0"])
        out.append((step, val))
    return out


def tolerance(chart):
    """Data units of 0.001 px (the SVG's precision) on each axis, doubled."""
    m = chart["map"]
    return (2e-3 * (m["x1"] - m["x0"]) / (m["right"] - m["left"]),
            2e-3 * (m["y1"] - m["y0"]) / (m["bottom"] - m["top"]))
