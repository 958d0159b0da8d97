"""import_files.py - inputs and checks for test_import.sh (`ddptrain data npy|npz|csv`).

  import_files.py make DIR          write good and hostile inputs with numpy into DIR
  import_files.py check OUT.h5 CASE DIR   compare an imported file with its source, exactly
  import_files.py predicted PRED.h5 NAME...  predict's class_names are NAMES and
                                    predicted_names the name of each prediction

Good inputs are seeded random arrays; the check compares every value and label, the
`classes` attribute and the stored shapes (N,H,W) -> (N,1,H,W).
"""
import os
import struct
import sys
import zipfile

import h5py
import numpy as np


def rng():
    return np.random.default_rng(7)


def good(d):
    r = rng()
    x = r.integers(0, 256, (64, 8, 8), dtype=np.uint8)
    y = r.integers(0, 4, 64).astype(np.int64)
    xt = r.integers(0, 256, (16, 8, 8), dtype=np.uint8)
    yt = r.integers(0, 4, 16).astype(np.int32)
    np.save(f"{d}/x.npy", x)
    np.save(f"{d}/y.npy", y)
    np.save(f"{d}/xt.npy", xt)
    np.save(f"{d}/yt.npy", yt)
    xc = r.random((40, 3, 4, 5), dtype=np.float32)
    yc = r.integers(0, 3, (40, 1)).astype(np.uint8)
    np.savez(f"{d}/stored.npz", x_train=x, y_train=y, x_test=xt, y_test=yt)
    np.savez_compressed(f"{d}/deflated.npz", imgs=xc, labs=yc)
    xd = r.standard_normal((30, 7)).astype(np.float32)
    yd = r.integers(0, 5, 30)
    np.save(f"{d}/xd.npy", xd)
    np.save(f"{d}/yd.npy", yd)
    # version 2.0 and 3.0 headers
    with open(f"{d}/x_v3.npy", "wb") as f:
        np.lib.format.write_array(f, x, version=(3, 0))
    # CSV with a header, the label in the middle; and one without a header
    with open(f"{d}/h.csv", "w") as f:
        f.write('f0, "label",f1,f2\n')
        for i in range(len(xd)):
            f.write(f"{xd[i, 0]!r},{yd[i]}, {xd[i, 1]!r},{xd[i, 2]!r}\r\n")
        f.write("\n")
    with open(f"{d}/ht.csv", "w") as f:
        f.write("f0,label,f1,f2\n")
        for i in range(10):
            f.write(f"{xd[i, 0]!r},{yd[i]},{xd[i, 1]!r},{xd[i, 2]!r}\n")
    with open(f"{d}/h3.csv", "w") as f:
        f.write("a,label,b\n1,0,2\n")
    np.savez_compressed(f"{d}/u8.npz", x_train=x, y_train=y)
    with open(f"{d}/n.csv", "w") as f:
        for i in range(10):
            f.write(f"{yd[i]},{xd[i, 3]!r},{xd[i, 4]!r}\n")


def header_file(path, header, data=b""):
    """A .npy of version 1 with the given header text (padded as numpy pads)."""
    h = header.encode()
    pad = 64 - (10 + len(h) + 1) % 64
    h = h + b" " * pad + b"\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h + data)


def hostile(d):
    x = rng().integers(0, 256, (64, 8, 8), dtype=np.uint8)
    raw = open(f"{d}/x.npy", "rb").read()
    open(f"{d}/trunc.npy", "wb").write(raw[:-100])
    open(f"{d}/trail.npy", "wb").write(raw + b"\0")
    open(f"{d}/magic.npy", "wb").write(b"NOTNUMPY" + raw[8:])
    open(f"{d}/version.npy", "wb").write(raw[:6] + b"\x09\x00" + raw[8:])
    header_file(f"{d}/huge.npy", "{'descr': '|u1', 'fortran_order': False, 'shape': (1099511627776, 28, 28), }", b"\0" * 784)
    header_file(f"{d}/extra.npy", "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 2), 'x': 1}", b"\0" * 4)
    header_file(f"{d}/nokey.npy", "{'descr': '|u1', 'shape': (2, 2), }", b"\0" * 4)
    header_file(f"{d}/bigend.npy", "{'descr': '>f4', 'fortran_order': False, 'shape': (2, 2), }", b"\0" * 16)
    header_file(f"{d}/object.npy", "{'descr': '|O', 'fortran_order': False, 'shape': (2, 2), }", b"\0" * 32)
    header_file(f"{d}/hlen.npy", "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 2), }")
    b = bytearray(open(f"{d}/hlen.npy", "rb").read())
    b[8:10] = struct.pack("<H", 60000)
    open(f"{d}/hlen.npy", "wb").write(bytes(b))
    np.save(f"{d}/fortran.npy", np.asfortranarray(x))
    np.save(f"{d}/f64.npy", x.astype(np.float64))
    np.save(f"{d}/flab.npy", np.zeros(64, np.float32))
    np.save(f"{d}/neglab.npy", np.full(64, -1, np.int16))
    np.save(f"{d}/shortlab.npy", np.zeros(63, np.uint8))
    nan = x.astype(np.float32)
    nan[5, 2, 3] = np.nan
    np.save(f"{d}/nan.npy", nan)
    # a deflated member with 64 zeroed bytes in its compressed data; a stored member with
    # one flipped byte (only the CRC-32 can tell)
    for src, dst, member, n in (("u8.npz", "corrupt.npz", "x_train.npy", 64),
                                ("stored.npz", "crc.npz", "x_train.npy", 1)):
        z = bytearray(open(f"{d}/{src}", "rb").read())
        with zipfile.ZipFile(f"{d}/{src}") as zf:
            info = zf.getinfo(member)
        off = info.header_offset + 30 + len(info.filename) + len(info.extra) + 300
        for i in range(n):
            z[off + i] = 0 if n > 1 else z[off + i] ^ 0xFF
        open(f"{d}/{dst}", "wb").write(bytes(z))
    open(f"{d}/trunc.npz", "wb").write(open(f"{d}/stored.npz", "rb").read()[:3000])
    open(f"{d}/notzip.npz", "wb").write(b"hello, not a zip archive\n" * 10)
    with open(f"{d}/cell.csv", "w") as f:
        f.write("a,b,label\n1,2,0\n3,4,1\n5,x7,1\n")
    with open(f"{d}/label.csv", "w") as f:
        f.write("a,b,label\n1,2,0\n3,4,1.5\n")
    with open(f"{d}/ragged.csv", "w") as f:
        f.write("1,2,0\n3,4\n")
    with open(f"{d}/quote.csv", "w") as f:
        f.write('1,2,0\n"3,4,1\n')


def held_out(x, y, fraction):
    """docs/data.md's split: of each class's rows in file order, the last
    floor(n_c F + 0.5) (round half up) go to /test; both keep file order."""
    test = np.zeros(len(y), bool)
    for c in np.unique(y):
        idx = np.flatnonzero(y == c)
        k = int(np.floor(len(idx) * fraction + 0.5))
        test[idx[len(idx) - k:]] = True
    return [("train", x[~test], y[~test]), ("test", x[test], y[test])]


def hostile_names(d):
    """Files whose class_names a reader must refuse, each otherwise valid."""
    def base(path, classes=3):
        f = h5py.File(path, "w")
        g = f.create_group("train")
        g.attrs["classes"] = classes
        g["images"] = np.zeros((6, 3), np.float32)  # the csv-held model's input
        g["labels"] = np.arange(6, dtype=np.uint8) % classes
        return g
    vs = h5py.string_dtype("utf-8")
    base(f"{d}/names-count.h5")["class_names"] = np.array(["a", "b"], dtype=object).astype(vs)
    base(f"{d}/names-utf8.h5")["class_names"] = np.array([b"a", b"\xff\xfe", b"c"], "S2")
    base(f"{d}/names-long.h5")["class_names"] = np.array(["a", "x" * 300, "c"], dtype=vs)
    base(f"{d}/names-wide.h5")["class_names"] = np.array([b"a", b"x" * 300, b"c"], "S300")
    base(f"{d}/names-int.h5")["class_names"] = np.arange(3)
    base(f"{d}/names-group.h5").create_group("class_names")
    base(f"{d}/names-empty.h5")["class_names"] = np.array(["a", "", "c"], dtype=vs)
    base(f"{d}/names-ctrl.h5")["class_names"] = np.array(["a", "b\nc", "c"], dtype=vs)


def predicted(path, names):
    f = h5py.File(path, "r")
    got = list(f["class_names"].asstr()[()])
    assert got == names, f"{path}: class_names {got} != {names}"
    want = [names[p] for p in f["predictions"][()]]
    assert list(f["predicted_names"].asstr()[()]) == want, f"{path}: predicted_names differ"
    print(f"ok   predict: class_names {names}, predicted_names {want[:4]}...")


def check(out, case, d):
    f = h5py.File(out, "r")
    names = None
    if case == "npy-held":  # --test-fraction 0.3 --classes cat,dog,bird,fish
        src = held_out(np.load(f"{d}/x.npy")[:, None], np.load(f"{d}/y.npy"), 0.3)
        names = ["cat", "dog", "bird", "fish"]
    elif case == "npz-held":  # --test-fraction 0.25
        z = np.load(f"{d}/deflated.npz")
        src = held_out(z["imgs"], z["labs"][:, 0], 0.25)
    elif case == "csv-held":  # --test-fraction 0.5 --classes "a b,ç,d,e,f"
        xd, yd = np.load(f"{d}/xd.npy"), np.load(f"{d}/yd.npy")
        src = held_out(xd[:, :3], yd, 0.5)
        names = ["a b", "ç", "d", "e", "f"]
    elif case == "npy":
        src = [("train", np.load(f"{d}/x.npy")[:, None], np.load(f"{d}/y.npy")),
               ("test", np.load(f"{d}/xt.npy")[:, None], np.load(f"{d}/yt.npy"))]
    elif case == "npz-stored":
        z = np.load(f"{d}/stored.npz")
        src = [("train", z["x_train"][:, None], z["y_train"]),
               ("test", z["x_test"][:, None], z["y_test"])]
    elif case == "npz-deflated":
        z = np.load(f"{d}/deflated.npz")
        src = [("train", z["imgs"], z["labs"][:, 0])]
    elif case == "npy-flat":
        src = [("train", np.load(f"{d}/xd.npy"), np.load(f"{d}/yd.npy"))]
    elif case == "csv-header":
        xd, yd = np.load(f"{d}/xd.npy"), np.load(f"{d}/yd.npy")
        src = [("train", xd[:, :3], yd), ("test", xd[:10, :3], yd[:10])]
    elif case == "csv-noheader":
        xd, yd = np.load(f"{d}/xd.npy"), np.load(f"{d}/yd.npy")
        src = [("train", xd[:10, 3:5], yd[:10])]
    else:
        sys.exit(f"unknown case {case}")
    groups = sorted(k for k in f.keys())
    want = sorted(s[0] for s in src)
    assert groups == want, f"{out}: groups {groups}, expected {want}"
    classes = max(int(s[2].max()) for s in src) + 1
    for name, x, y in src:
        g = f[name]
        xi, yi = g["images"][...], g["labels"][...]
        assert xi.dtype == x.dtype, f"{name}: dtype {xi.dtype} != {x.dtype}"
        assert xi.shape == x.shape, f"{name}: shape {xi.shape} != {x.shape}"
        assert np.array_equal(xi, x), f"{name}: images differ"
        assert np.array_equal(yi, y), f"{name}: labels differ"
        assert int(g.attrs["classes"]) == classes, f"{name}: classes {g.attrs['classes']}"
        got = list(g["class_names"].asstr()[()]) if "class_names" in g else None
        assert got == names, f"{name}: class_names {got} != {names}"
    print(f"ok   {case}: {', '.join(f'{s[0]} {s[1].shape} {s[1].dtype}' for s in src)} exact")


if __name__ == "__main__":
    if sys.argv[1] == "make":
        good(sys.argv[2])
        hostile(sys.argv[2])
        hostile_names(sys.argv[2])
    elif sys.argv[1] == "predicted":
        predicted(sys.argv[2], sys.argv[3:])
    else:
        check(sys.argv[2], sys.argv[3], sys.argv[4])
