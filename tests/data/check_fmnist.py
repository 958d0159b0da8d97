"""check_fmnist.py OUT.h5 IDX_DIR - compare an imported Fashion-MNIST file with the IDX
files, decoded here independently with gzip + numpy: groups, shapes, dtypes, attributes,
every pixel and label, and a few values printed for the record. Exit 1 on a mismatch."""
import gzip
import os
import sys

import h5py
import numpy as np


def read_idx(path):
    with gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb") as f:
        raw = f.read()
    assert raw[0] == 0 and raw[1] == 0 and raw[2] == 8, "%s: not an unsigned-byte IDX" % path
    nd = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(nd)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * nd).reshape(dims)


def find(d, name):
    for suffix in ("", ".gz"):
        if os.path.exists(os.path.join(d, name + suffix)):
            return os.path.join(d, name + suffix)
    raise SystemExit("missing %s in %s" % (name, d))


def main():
    out, d = sys.argv[1], sys.argv[2]
    bad = []
    with h5py.File(out, "r") as f:
        if sorted(f.keys()) != ["test", "train"]:
            bad.append("groups %s" % sorted(f.keys()))
        if not isinstance(f.attrs.get("source"), str):
            bad.append("source attribute %r is not a string" % f.attrs.get("source"))
        for group, prefix, n in (("train", "train", 60000), ("test", "t10k", 10000)):
            img = read_idx(find(d, prefix + "-images-idx3-ubyte"))
            lab = read_idx(find(d, prefix + "-labels-idx1-ubyte"))
            g = f[group]
            hi, hl = g["images"], g["labels"]
            if hi.shape != (n, 1, 28, 28) or hi.dtype != np.uint8:
                bad.append("%s/images %s %s" % (group, hi.shape, hi.dtype))
            if hl.shape != (n,) or hl.dtype != np.uint8:
                bad.append("%s/labels %s %s" % (group, hl.shape, hl.dtype))
            if hi.chunks is not None or hi.compression is not None:
                bad.append("%s/images is chunked or compressed" % group)
            if int(g.attrs.get("classes", -1)) != 10:
                bad.append("%s classes attribute %r" % (group, g.attrs.get("classes")))
            a, l = hi[...], hl[...]
            if not np.array_equal(a[:, 0], img):
                bad.append("%s: %d pixels differ" % (group, int((a[:, 0] != img).sum())))
            if not np.array_equal(l, lab):
                bad.append("%s: %d labels differ" % (group, int((l != lab).sum())))
            for i, y, x in ((0, 14, 14), (1, 5, 20), (n - 1, 27, 0), (n // 2, 10, 10)):
                print("%s[%d] label %d/%d pixel(%d,%d) %d/%d" % (group, i, l[i], lab[i], y, x,
                      a[i, 0, y, x], img[i, y, x]))
            print("%s: images %s %s, labels %s %s, classes %d" % (group, hi.shape, hi.dtype,
                  hl.shape, hl.dtype, g.attrs["classes"]))
    for b in bad:
        print("FAIL:", b)
    print("PASS" if not bad else "FAIL")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
