#!/usr/bin/env python3
"""doc_refs.py SRC - the project's documentation (README.md and every text file under docs/,
slurm/, configs/ and bench/) names only source files that exist and speaks of the software as it
is: every path of a source file must exist: one that starts with src/ (a file, or a
directory such as src/train/) from the root or the document's directory, a shorter one
(dist/binding.h, cuda/dlopen.cu, tests/unit/check.c) as the end of a path in the tree; DESIGN.md (not part of the repository) and issue numbers ("Issue 17",
"issue 16's") must not appear. Source, tests and tools (src/, tests/, tools/) are held to the last rule too:
names and comments by behaviour, no issue numbers. Prints each offence as FILE:LINE: WHAT and
exits 1."""
import os
import re
import sys

DIRS = ("docs", "slurm", "configs", "bench")
CODE_DIRS = ("src", "tests", "tools")
SKIP_DIRS = {"out", "__pycache__", "images"}
# a path of a source file (dir/.../name.ext), or anything starting with src/
SOURCE = re.compile(r"(?<![\w./-])((?:[A-Za-z_][\w-]*/)+[\w-]+\.(?:c|h|inc|cu|cuh|cc)"
                    r"|src(?:/[\w.-]+)*/?)(?![\w/-])")
HISTORY = [(re.compile(r"\bDESIGN\.md\b"), "DESIGN.md is not part of the repository"),
           (re.compile(r"\b[Ii]ssues? #?\d+"), "an issue number (describe the software instead)")]


def tree(src):
    """Every file and directory of the source tree as a path from the root (no build outputs)."""
    out = set()
    for root, dirs, names in os.walk(src):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in ("build", "__pycache__")]
        rel = os.path.relpath(root, src)
        out.update(n if rel == "." else f"{rel}/{n}" for n in dirs + names)
    return out


def exists(src, doc, path, paths):
    path = path.rstrip("/.")
    if any(os.path.exists(os.path.normpath(os.path.join(base, path)))
           for base in (src, os.path.dirname(doc))):
        return True
    return not path.startswith("src") and any(p.endswith("/" + path) for p in paths)


def check_history(src, path):
    """An issue number in a source, test or tool file (this file names the patterns)."""
    if os.path.samefile(path, __file__):
        return []
    try:
        lines = open(path, encoding="utf-8").read().splitlines()
    except UnicodeDecodeError:
        return []
    rel = os.path.relpath(path, src)
    return [f"{rel}:{no}: '{m.group(0)}': {why}" for no, line in enumerate(lines, 1)
            for pat, why in HISTORY[1:] for m in pat.finditer(line)]


def code_files(src):
    out = []
    for d in CODE_DIRS:
        for root, dirs, names in os.walk(os.path.join(src, d)):
            dirs[:] = sorted(x for x in dirs if x not in SKIP_DIRS and not x.startswith("."))
            out += [os.path.join(root, n) for n in sorted(names)]
    return out


def check(src, doc, paths):
    bad = []
    try:
        lines = open(doc, encoding="utf-8").read().splitlines()
    except UnicodeDecodeError:
        return bad  # not text
    rel = os.path.relpath(doc, src)
    for no, line in enumerate(lines, 1):
        for m in SOURCE.finditer(line):
            path = m.group(1)
            if "*" in line[m.start():m.end() + 1] or path in ("src", "src/"):
                continue
            if not exists(src, doc, path, paths):
                bad.append(f"{rel}:{no}: {path} (no such file in the source tree)")
        for pat, why in HISTORY:
            for m in pat.finditer(line):
                bad.append(f"{rel}:{no}: '{m.group(0)}': {why}")
    return bad


def files(src):
    out = [os.path.join(src, "README.md")]
    for d in DIRS:
        for root, dirs, names in os.walk(os.path.join(src, d)):
            dirs[:] = sorted(x for x in dirs if x not in SKIP_DIRS)
            out += [os.path.join(root, n) for n in sorted(names)]
    return out


def main():
    src = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".")
    docs = files(src)
    paths = tree(src)
    bad = [b for f in docs if os.path.isfile(f) for b in check(src, f, paths)]
    code = code_files(src)
    bad += [b for f in code if os.path.isfile(f) for b in check_history(src, f)]
    for b in bad:
        print(b)
    print(f"{len(docs)} documentation files and {len(code)} source, test and tool files, "
          f"{len(bad)} stale reference(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
