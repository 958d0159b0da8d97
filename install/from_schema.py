#!/usr/bin/env python3
"""from_schema.py - files generated from the running ddptrain, so they cannot drift from it:

  from_schema.py DDPTRAIN man DATE OUT        ddptrain-job(5): every job-file key, from the
                                              schema as `ddptrain --job-reference` prints it
  from_schema.py DDPTRAIN bash TEMPLATE OUT   bash completion: TEMPLATE with @COMMANDS@, @OPTIONS@
                                              (each subcommand's options, from its --help) and
                                              @KEYS@ (every SECTION.KEY of the schema) filled in
"""
import re
import subprocess
import sys
import textwrap


def run(exe, *args):
    return subprocess.run([exe, *args], check=True, capture_output=True, text=True).stdout


def schema(exe):
    """(preamble lines, [(section, [(key, type, default, range, meaning)])])"""
    pre, sections = [], []
    for line in run(exe, "--job-reference").splitlines():
        m = re.match(r"^## \[(\w+)\]$", line)
        if m:
            sections.append((m.group(1), []))
        elif sections and line.startswith("| `"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            key, typ, default, rng = cells[:4]
            sections[-1][1].append((key.strip("`"), typ, default[1:-1], rng, "|".join(cells[4:])))
        elif not sections and not line.startswith("# "):
            pre.append(line)
    if not sections:
        sys.exit("from_schema.py: --job-reference printed no [section]")
    return pre, sections


def roff(text):
    """Plain text with `code` as bold, escaped for man(7)."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return re.sub(r"`([^`]*)`", r"\\fB\1\\fR", text)


def lines(text):
    """roff text as source lines of at most 80 bytes, none starting a request."""
    return ["\\&" + w if w[:1] in (".", "'") else w
            for w in textwrap.wrap(text, 78, break_long_words=False, break_on_hyphens=False)]


def man(exe, date, out):
    pre, sections = schema(exe)
    version = run(exe, "--version").split()[1]
    o = [f'.TH DDPTRAIN\\-JOB 5 {date} "ddptrain {version}" "File Formats"',
         ".SH NAME", "ddptrain\\-job \\- the job file of ddptrain: every section and key",
         ".SH SYNOPSIS", ".B ddptrain", ".I JOB.ini",
         "[\\fB\\-\\-set\\fR \\fISECTION.KEY\\fB=\\fIVALUE\\fR ...]",
         ".SH DESCRIPTION",
         "A job file is an INI file: [section] lines, then key = value lines.",
         "This page and", ".B docs/job\\-file.md", "are generated from the job schema.", ".PP"]
    para = []
    for line in pre[1:] + [""]:   # the first line says where the Markdown is generated from
        if line.strip():
            para.append(line)
        elif para:
            o += lines(roff(" ".join(para))) + [".PP"]
            para = []
    if o[-1] == ".PP":
        o.pop()
    for section, keys in sections:
        o += [f'.SH "[{section}]"']
        for key, typ, default, rng, meaning in keys:
            o += [".TP", f".B {key}"]
            what = f"{typ}, default \\(lq{roff(default)}\\(rq" if default else f"{typ}, default empty"
            if rng:
                what += f"; {roff(rng)}"
            o += lines(f"({what})") + [".br"] + lines(roff(meaning))
    o += [".SH EXAMPLES", ".EX", "[data]", "file = datasets/fashion\\-mnist.h5",
          "batch_size = 64", "", "[model]", "layers = flatten, linear(128), relu, linear(10)",
          ".EE", ".PP", "Example jobs are installed in",
          ".IR PREFIX/share/ddptrain/configs/ .",
          ".SH SEE ALSO", ".BR ddptrain (1),", ".BR ddptrain\\-validate (8)"]
    with open(out, "w") as f:
        f.write("\n".join(o) + "\n")


def bash(exe, template, out):
    _, sections = schema(exe)
    keys = " ".join(f"{s}.{k}" for s, ks in sections for k, *_ in ks)
    commands = []
    for line in run(exe, "--help").splitlines():
        m = re.match(r"^  ddptrain (\S+)", line)
        if m and re.match(r"^-?-?[a-z][a-z-]*$", m.group(1)):
            commands.append(m.group(1))
    options = []
    for c in ["train"] + [c for c in commands if not c.startswith("-")]:
        text = subprocess.run([exe, c, "--help"], capture_output=True, text=True).stdout
        opts = sorted(set(re.findall(r"(?<![^\s\[(|])(--?[a-z][a-z0-9-]*)", text)) | {"--help"})
        options.append(f"    {c}) opts='{' '.join(opts)}' ;;")
    text = open(template).read()
    text = text.replace("@COMMANDS@", " ".join(["train"] + commands))
    text = text.replace("@OPTIONS@", "\n".join(options)).replace("@KEYS@", keys)
    with open(out, "w") as f:
        f.write(text)


if __name__ == "__main__":
    if len(sys.argv) != 5 or sys.argv[2] not in ("man", "bash"):
        sys.exit(__doc__)
    (man if sys.argv[2] == "man" else bash)(sys.argv[1], sys.argv[3], sys.argv[4])
