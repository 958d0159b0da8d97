#!/usr/bin/python3
"""report.html as a browser draws it: headless Chromium renders the report of a run written by
hand (a preemption, a resume, evaluations) to a PNG, which must have the window's size, not be
blank, and show the curves in their colours (the first run's blue, the test series' dashes in
the same blue, the preemption's red). Skipped (77) when no Chromium is installed: Debian's
`chromium` takes some 400 MB, more than the test tools should pull in. DDP_SCREENSHOT=PATH
keeps the picture."""
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import report_numbers as rn  # noqa: E402

W, H = 1320, 1400


def browser():
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def png_pixels(path):
    """(width, height, rows of RGB tuples) of a PNG: Pillow's decoder when it is there."""
    try:
        from PIL import Image
    except ImportError:
        return png_header(path) + (None,)
    im = Image.open(path).convert("RGB")
    return im.width, im.height, list(im.getdata())


def png_header(path):
    with open(path, "rb") as f:
        head = f.read(24)
    if head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        sys.exit(f"FAIL: {path} is not a PNG")
    return struct.unpack(">II", head[16:24])


def idat_share(path):
    """Without Pillow: the share of decompressed image bytes that are neither 0 nor 255 (a
    blank white page filters to almost nothing else)."""
    data, raw = open(path, "rb").read(), b""
    i = 8
    while i < len(data):
        n, kind = struct.unpack(">I4s", data[i:i + 8])
        if kind == b"IDAT":
            raw += data[i + 8:i + 8 + n]
        i += 12 + n
    px = zlib.decompress(raw)
    return sum(1 for b in px[::7] if b not in (0, 255)) / max(1, len(px[::7]))


def near(p, rgb, tol=40):
    return all(abs(a - b) <= tol for a, b in zip(p, rgb))


def main():
    chromium = browser()
    if not chromium:
        print("SKIP: no chromium (Debian package chromium) to render report.html")
        return 77
    tmp = tempfile.mkdtemp()
    recs = rn.records()
    recs.insert(30, {"kind": "stop", "epoch": 2, "step": 560, "signal": "USR1", "time": 1796400100})
    recs.insert(31, {"kind": "start", "epoch": 2, "step": 560, "version": "0.1.0",
                     "launcher": "srun", "comm": "mpi", "device": "cpu", "threads": 4,
                     "hosts": ["n1", "n2"], "time": 1796400200, "world_size": 2,
                     "resumed": True})
    d = rn.run_dir(os.path.join(tmp, "run"), recs)
    rn.report(["run"], tmp)
    if rn.errors:
        return 1
    png = os.path.join(tmp, "report.png")
    r = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                        "--hide-scrollbars", f"--window-size={W},{H}", f"--screenshot={png}",
                        "file://" + os.path.join(d, "report.html")],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=90,
                       env=dict(os.environ, HOME=tmp))
    if r.returncode != 0 or not os.path.exists(png):
        print(f"FAIL: chromium exited {r.returncode}, no screenshot:\n{r.stdout[-2000:]}")
        return 1
    if os.environ.get("DDP_SCREENSHOT"):
        shutil.copy(png, os.environ["DDP_SCREENSHOT"])
    w, h, pixels = png_pixels(png)
    fails = []
    if (w, h) != (W, H):
        fails.append(f"the screenshot is {w}x{h}, want {W}x{H}")
    if pixels is None:
        share = idat_share(png)
        if share < 0.001:
            fails.append(f"the screenshot looks blank ({share:.4%} of its bytes drawn)")
    else:
        dark = sum(1 for p in pixels if sum(p) < 600)
        blue = sum(1 for p in pixels if near(p, (0x1f, 0x77, 0xb4)))
        red = sum(1 for p in pixels if near(p, (0xd6, 0x27, 0x28)))
        green = sum(1 for p in pixels if near(p, (0x2c, 0xa0, 0x2c)))
        print(f"drawn pixels: {dark} non-white, {blue} blue, {red} red, {green} green")
        if dark < 0.01 * w * h:
            fails.append(f"the screenshot is almost blank ({dark} drawn pixels)")
        if blue < 2000 or red < 100 or green < 100:
            fails.append(f"curves or markers missing: {blue} blue, {red} red, {green} green px")
    for f in fails:
        print("FAIL:", f)
    print(f"report-chromium: {w}x{h} screenshot, {len(fails)} failures")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
