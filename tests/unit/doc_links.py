#!/usr/bin/env python3
"""doc_links.py SRC - every relative link in the project's Markdown (README.md, docs/, slurm/,
bench/, configs/) resolves to a file or directory of the source tree, and every `#anchor` of a
link into a Markdown file names one of its headings (GitHub's rule: lower case, punctuation
dropped, spaces to hyphens). Prints each broken link as FILE:LINE: TARGET and exits 1."""
import os
import re
import sys

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^\s*```")


def anchors(path):
    """The anchors GitHub makes for the headings of a Markdown file."""
    out, seen, fenced = set(), {}, False
    for line in open(path, encoding="utf-8"):
        if FENCE.match(line):
            fenced = not fenced
        m = None if fenced else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            a = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            n = seen.get(a, 0)
            seen[a] = n + 1
            out.add(a if n == 0 else f"{a}-{n}")
    return out


def check(src, md):
    bad, fenced = [], False
    for no, line in enumerate(open(md, encoding="utf-8"), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        for target in LINK.findall(re.sub(r"`[^`]*`", "", line)):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            path, _, frag = target.partition("#")
            full = os.path.normpath(os.path.join(os.path.dirname(md), path)) if path else md
            if not full.startswith(src) or not os.path.exists(full):
                bad.append(f"{os.path.relpath(md, src)}:{no}: {target} (no such file)")
            elif frag and full.endswith(".md") and frag not in anchors(full):
                bad.append(f"{os.path.relpath(md, src)}:{no}: {target} (no heading #{frag})")
    return bad


def main():
    src = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".")
    files = [os.path.join(src, "README.md")]
    for d in ("docs", "slurm", "bench", "configs"):
        for root, _, names in os.walk(os.path.join(src, d)):
            files += [os.path.join(root, n) for n in sorted(names) if n.endswith(".md")]
    bad = [b for f in files if os.path.exists(f) for b in check(src, f)]
    for b in bad:
        print(b)
    print(f"{len(files)} Markdown files, {len(bad)} broken link(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
