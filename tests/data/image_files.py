"""image_files.py - inputs and checks for test_imagefolder.sh (`ddptrain data imagefolder`).

  image_files.py make DIR              class trees of PNG and JPEG files written by Pillow,
                                       and hostile trees
  image_files.py check OUT.h5 CASE DIR compare an import with Pillow's decode: PNG exact,
                                       JPEG within 2 levels

Classes are numbered by sorted folder name; files in a class folder in sorted name order.
"""
import os
import sys

import h5py
import numpy as np
from PIL import Image

CLASSES = ["cat", "dog", "emu"]


def write(path, arr, mode):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    im = Image.fromarray(arr, mode)
    if path.endswith(".jpg"):
        im.save(path, quality=90)
    else:
        im.save(path)


def make(d):
    r = np.random.default_rng(3)
    for split, n in (("train", 5), ("test", 2)):
        for c in CLASSES:
            for i in range(n):
                write(f"{d}/png/{split}/{c}/{i:03d}.png",
                      r.integers(0, 256, (6, 7, 3), dtype=np.uint8), "RGB")
                write(f"{d}/gray/{c}/{i:03d}.png", r.integers(0, 256, (9, 8), dtype=np.uint8), "L")
                # smooth content: JPEG's loss stays small
                y, x = np.mgrid[0:16, 0:16]
                base = (x * 8 + y * 4 + 40 * CLASSES.index(c) + 10 * i) % 256
                rgb = np.stack([base, 255 - base, (base * 2) % 256], -1).astype(np.uint8)
                write(f"{d}/jpg/{split}/{c}/{i:03d}.jpg", rgb, "RGB")
                write(f"{d}/mixed/{c}/{i:03d}.png",
                      r.integers(0, 256, (5 + i, 4 + i, 4), dtype=np.uint8), "RGBA")
    # class folders named in UTF-8 (sorted bytewise), and one whose name is not UTF-8
    for c in ("zebra", "Émeu", "ant b"):
        write(f"{d}/utf8/{c}/a.png", np.zeros((4, 4), np.uint8), "L")
    os.makedirs(os.fsencode(f"{d}/badname/") + b"caf\xe9")
    write(f"{d}/badname/ok/a.png", np.zeros((4, 4), np.uint8), "L")
    Image.fromarray(np.zeros((4, 4), np.uint8), "L").save(
        os.fsencode(f"{d}/badname/") + b"caf\xe9/a.png", format="PNG")
    # hostile trees
    write(f"{d}/junk/cat/a.png", np.zeros((4, 4), np.uint8), "L")
    open(f"{d}/junk/cat/notes.txt", "w").write("not an image\n")
    write(f"{d}/trunc/cat/a.png", np.zeros((64, 64, 3), np.uint8) + 7, "RGB")
    data = open(f"{d}/trunc/cat/a.png", "rb").read()
    open(f"{d}/trunc/cat/a.png", "wb").write(data[: len(data) // 2])
    write(f"{d}/sizes/cat/a.png", np.zeros((4, 4), np.uint8), "L")
    write(f"{d}/sizes/dog/b.png", np.zeros((5, 4), np.uint8), "L")
    # a PNG whose header claims 100000 x 100000 pixels
    write(f"{d}/huge/cat/a.png", np.zeros((4, 4), np.uint8), "L")
    b = bytearray(open(f"{d}/huge/cat/a.png", "rb").read())
    import struct
    import zlib
    b[16:24] = struct.pack(">II", 100000, 100000)
    b[29:33] = struct.pack(">I", zlib.crc32(bytes(b[12:29])))
    open(f"{d}/huge/cat/a.png", "wb").write(bytes(b))
    os.makedirs(f"{d}/badtest/train/cat")
    os.makedirs(f"{d}/badtest/test/cow")
    write(f"{d}/badtest/train/cat/a.png", np.zeros((4, 4), np.uint8), "L")
    write(f"{d}/badtest/test/cow/a.png", np.zeros((4, 4), np.uint8), "L")
    os.makedirs(f"{d}/empty/cat")
    write(f"{d}/jtrunc/cat/a.jpg", np.zeros((32, 32, 3), np.uint8) + 100, "RGB")
    data = open(f"{d}/jtrunc/cat/a.jpg", "rb").read()
    open(f"{d}/jtrunc/cat/a.jpg", "wb").write(data[: len(data) // 2])


def resize(a, h, w):
    """Bilinear, half-pixel centres, edges clamped, rounded: docs/data.md, imagefolder."""
    sh, sw = a.shape[:2]
    fy = np.maximum((np.arange(h) + 0.5) * sh / h - 0.5, 0)
    fx = np.maximum((np.arange(w) + 0.5) * sw / w - 0.5, 0)
    y0, x0 = fy.astype(int), fx.astype(int)
    y1, x1 = np.minimum(y0 + 1, sh - 1), np.minimum(x0 + 1, sw - 1)
    ay, ax = (fy - y0)[:, None, None], (fx - x0)[None, :, None]
    a = a.astype(np.float64)
    top = a[y0][:, x0] * (1 - ax) + a[y0][:, x1] * ax
    bot = a[y1][:, x0] * (1 - ax) + a[y1][:, x1] * ax
    return np.floor(top * (1 - ay) + bot * ay + 0.5).astype(np.uint8)


def expected(root, mode, size=None, fraction=0.0):
    out = {"train": ([], []), "test": ([], [])}
    trees = [("train", f"{root}/train"), ("test", f"{root}/test")] if os.path.isdir(
        f"{root}/train") else [(None, root)]
    for split, tree in trees:
        for k, c in enumerate(sorted(os.listdir(tree))):
            files = sorted(os.listdir(f"{tree}/{c}"))
            nt = int(np.floor(len(files) * fraction + 0.5))
            for i, f in enumerate(files):
                a = np.asarray(Image.open(f"{tree}/{c}/{f}").convert(mode))
                a = a[:, :, None] if a.ndim == 2 else a
                if size:
                    a = resize(a, *size)
                s = split or ("train" if i < len(files) - nt else "test")
                out[s][0].append(a.transpose(2, 0, 1))
                out[s][1].append(k)
    return {s: (np.stack(x), np.array(y)) for s, (x, y) in out.items() if x}


def check(path, case, d):
    cases = {"png": (f"{d}/png", "RGB", None, 0.0, 0),
             "gray": (f"{d}/gray", "L", None, 0.4, 0),
             "gray-rgb": (f"{d}/gray", "RGB", None, 0.0, 0),
             "jpg": (f"{d}/jpg", "RGB", None, 0.0, 2),
             "jpg-gray": (f"{d}/jpg", "L", None, 0.0, 2),
             "mixed": (f"{d}/mixed", "RGB", (6, 5), 0.0, 0)}
    root, mode, size, fraction, tol = cases[case]
    want = expected(root, mode, size, fraction)
    f = h5py.File(path, "r")
    assert sorted(f.keys()) == sorted(want), f"groups {sorted(f.keys())} != {sorted(want)}"
    worst = 0
    for s, (x, y) in want.items():
        xi = f[s]["images"][...]
        assert xi.shape == x.shape and xi.dtype == np.uint8, f"{s}: {xi.shape} != {x.shape}"
        assert np.array_equal(f[s]["labels"][...], y), f"{s}: labels differ"
        assert int(f[s].attrs["classes"]) == len(CLASSES)
        names = list(f[s]["class_names"].asstr()[()])
        assert names == CLASSES, f"{s}: class_names {names} != {CLASSES}"
        diff = int(np.abs(xi.astype(int) - x.astype(int)).max())
        worst = max(worst, diff)
        assert diff <= tol, f"{s}: images differ by up to {diff} (tolerance {tol})"
    print(f"ok   {case}: " + ", ".join(f"{s} {x.shape}" for s, (x, _) in want.items()) +
          f" max difference {worst} (tolerance {tol})")


def names(path, *want):
    """The class_names of every group of path are want, index = label."""
    f = h5py.File(path, "r")
    for s in f:
        got = list(f[s]["class_names"].asstr()[()])
        assert got == list(want), f"{s}: class_names {got} != {list(want)}"
    print(f"ok   class_names {list(want)} in {sorted(f)}")


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2])
    elif sys.argv[1] == "names":
        names(sys.argv[2], *sys.argv[3:])
    else:
        check(sys.argv[2], sys.argv[3], sys.argv[4])
