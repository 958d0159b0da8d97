#!/bin/bash
# install.sh - `meson install` gives a prefix that works on its own: the build is staged into a
# fresh DESTDIR and, from a working directory outside the source tree,
#   1. the installed ddptrain finds its shipped files under the prefix, never in the source
#      tree: `validate --quick` passes its golden check against PREFIX/share/ddptrain's
#      reference (with the source and build trees hidden by a private mount where unshare
#      allows one), and `validate --expect NAME` finds a shipped expectation file;
#   2. the man pages are clean under mandoc -T lint and groff -w all; ddptrain-job(5) documents
#      every key of --job-reference, ddptrain(1) every subcommand of --help,
#      ddptrain-validate(8) every option of validate --help;
#   3. bash completion offers the subcommands, a subcommand's options and --set's keys;
#   4. under Lmod, `module load ddptrain` puts this ddptrain on PATH and its pages on MANPATH.
# Needs mandoc, groff and lmod (tools/packages.sh DDP_PKGS_TEST): without one, the checks that
# need it are skipped and the test exits 77 once everything else has passed.
set -u
DDPTRAIN=${DDPTRAIN:?} DDP_SRC=${DDP_SRC:?} DDP_BUILD=${DDP_BUILD:?}
T=$(mktemp -d /tmp/ddp-install.XXXXXX)
trap 'rm -rf "$T"' EXIT
fail=0 skipped=()
no() { echo "FAIL: $*"; fail=1; }
ok() { echo "ok: $*"; }

meson install -C "$DDP_BUILD" --no-rebuild --quiet --destdir "$T/dest" > "$T/install.log" 2>&1 ||
    { cat "$T/install.log"; echo "FAIL: meson install --destdir failed"; exit 1; }
BIN=$(find "$T/dest" -path '*/bin/ddptrain' -type f | head -1)
[ -x "$BIN" ] || { echo "FAIL: no bin/ddptrain under the destdir"; exit 1; }
P=${BIN%/bin/ddptrain} # the staged prefix
S=$P/share
for f in bin/ddptrain share/ddptrain/configs/validate-ref/cpu-w1.ref \
    share/ddptrain/configs/expect-h100-sxm.ini share/ddptrain/configs/validate.ini \
    share/ddptrain/configs/fashion-mlp.ini share/ddptrain/slurm/single-node.sbatch \
    share/doc/ddptrain/job-file.md share/doc/ddptrain/README.md share/man/man1/ddptrain.1 \
    share/man/man5/ddptrain-job.5 share/man/man8/ddptrain-validate.8 \
    share/bash-completion/completions/ddptrain share/modulefiles/ddptrain; do
    [ -e "$P/$f" ] || no "meson install did not install PREFIX/$f"
done
[ -e "$P/share/ddptrain/configs/fashion-mlp.ini" ] || true

# 1. the shipped files from the prefix, the source tree out of sight
mkdir -p "$T/work" "$T/empty"
cd "$T/work" || exit 1
hide=()
if unshare -rm true 2>/dev/null; then
    # the build tree first: it may lie inside the source tree
    hide=(unshare -rm sh -c 'mount --bind "$0" "$1" && mount --bind "$0" "$2" && shift 2 &&
          exec "$@"' "$T/empty" "$DDP_BUILD" "$DDP_SRC")
    "${hide[@]}" test -e "$DDP_SRC/meson.build" && { no "unshare did not hide $DDP_SRC"; hide=(); }
else
    echo "note: no private mounts here (unshare -rm); the source tree stays visible"
fi
out=$("${hide[@]}" "$BIN" validate --quick 2>&1)
ref="$S/ddptrain/configs/validate-ref/cpu-w1.ref"
if grep -qF "PASS: 30 steps within 0.001 of $ref" <<< "$out"; then
    ok "installed validate --quick passes its golden check against $ref${hide:+ (source tree hidden)}"
else
    no "installed validate --quick did not pass against $ref:"
    grep -E "golden|PASS|WARN|FAIL|reference" <<< "$out" | head -8
fi
out=$("${hide[@]}" "$BIN" --version 2>&1)
grep -qxF "data: $S/ddptrain (installed)" <<< "$out" && ok "--version: data: $S/ddptrain" ||
    no "installed --version does not name $S/ddptrain as its data: $(grep data: <<< "$out")"
out=$("${hide[@]}" "$BIN" validate --quick --expect cpu-2core-test 2>&1)
grep -q "^validate: PASS\|^validate: .*retest" <<< "$out" &&
    ! grep -q "expect.*cannot open" <<< "$out" && ok "validate --expect cpu-2core-test" ||
    no "installed validate --expect cpu-2core-test: $(tail -2 <<< "$out")"

# 2. man pages: lint-clean, and complete against the binary's own lists
M=$S/man
plain() { sed -e 's/\\f[BIRP]//g; s/\\-/-/g; s/\\&//g' "$1"; }
if command -v mandoc > /dev/null; then
    lint=$(mandoc -T lint "$M/man1/ddptrain.1" "$M/man5/ddptrain-job.5" \
        "$M/man8/ddptrain-validate.8" 2>&1)
    [ -z "$lint" ] && ok "mandoc -T lint: clean" || no "mandoc -T lint: $(head -5 <<< "$lint")"
else
    skipped+=(mandoc)
fi
if command -v groff > /dev/null; then
    for p in "$M"/man?/*; do
        w=$(groff -w all -man -Tutf8 -z "$p" 2>&1)
        [ -z "$w" ] || no "groff -w all $p: $(head -3 <<< "$w")"
    done
    ok "groff -w all: looked at the three pages"
else
    skipped+=(groff)
fi
job=$(plain "$M/man5/ddptrain-job.5")
n=0
while IFS= read -r line; do
    if [[ $line =~ ^##\ \[([a-z_]+)\] ]]; then
        sec=${BASH_REMATCH[1]}
        grep -qxF ".SH \"[$sec]\"" <<< "$job" || no "ddptrain-job(5) has no [$sec] section"
    elif [[ $line =~ ^\|\ \`([a-z0-9_]+)\`\ \| ]]; then
        key=${BASH_REMATCH[1]} n=$((n + 1))
        # the key's entry lies between its section's heading and the next heading
        awk -v s=".SH \"[$sec]\"" -v k=".B $key" '$0 == s {on = 1; next} /^\.SH/ {on = 0}
            on && $0 == k {found = 1} END {exit !found}' <<< "$job" ||
            no "ddptrain-job(5) does not document [$sec] $key"
    fi
done < <("$BIN" --job-reference)
[ "$n" -gt 20 ] && ok "ddptrain-job(5) documents all $n keys of --job-reference" ||
    no "--job-reference listed only $n keys"
# ddptrain(1): the first word of each entry (the line after .TP) under SUBCOMMANDS
entries=$(plain "$M/man1/ddptrain.1" | awk '/^\.SH/ {on = ($2 == "SUBCOMMANDS")}
    on && tp {sub(/^\.[A-Z]+ /, ""); gsub(/"/, ""); print $1} {tp = on && $0 == ".TP"}')
for c in train $("$BIN" --help | sed -n 's/^  ddptrain \([a-z-]*\).*/\1/p'); do
    grep -qxF -- "$c" <<< "$entries" || no "ddptrain(1) has no entry for the subcommand $c"
done
eight=$(plain "$M/man8/ddptrain-validate.8")
for o in $("$BIN" validate --help | grep -oE '(^|[ [(|])--[a-z-]+' | tr -d ' [(|' | sort -u); do
    grep -qE "^\.(B|BI|BR) $o( |$)" <<< "$eight" || no "ddptrain-validate(8) lacks $o"
done
ok "ddptrain(1) lists every subcommand, ddptrain-validate(8) every option"

# 3. bash completion, as bash calls it
complete_words() { # WORDS...: what _ddptrain offers for the last word
    bash -c 'source "$0"; COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
             _ddptrain; printf "%s\n" "${COMPREPLY[@]}"' \
        "$S/bash-completion/completions/ddptrain" "$@" 2>&1
}
got=$(complete_words ddptrain "")
for c in train eval check export predict validate launch data report env hostlist; do
    grep -qx "$c" <<< "$got" || no "completion of 'ddptrain ' lacks $c"
done
got=$(complete_words ddptrain job.ini --set data.)
grep -qx "data.batch_size=" <<< "$got" && grep -qx "data.file=" <<< "$got" &&
    ! grep -qv "^data\." <<< "$got" || no "completion of '--set data.' gave: $(echo $got)"
got=$(complete_words ddptrain validate --re)
grep -qx -- "--reference" <<< "$got" && grep -qx -- "--record-expect" <<< "$got" ||
    no "completion of 'validate --re' gave: $(echo $got)"
ok "completion offers subcommands, options and --set keys"

# 4. Lmod
init=/usr/share/lmod/lmod/init/bash
if [ -r "$init" ]; then
    out=$(env -i HOME="$T" PATH=/usr/bin:/bin TERM=dumb bash --norc --noprofile -c '
        source "$0" > /dev/null 2>&1 || exit 9
        module use "$1/share/modulefiles" && module load ddptrain || exit 8
        command -v ddptrain; ddptrain --version | head -1; man -w ddptrain; man -w ddptrain-job
        man -w ls > /dev/null && echo "system pages still found"' "$init" "$P" 2>&1)
    v=$(awk -F"'" '/version:/ {print $2; exit}' "$DDP_SRC/meson.build")
    grep -qx "$BIN" <<< "$out" && grep -qx "ddptrain $v" <<< "$out" &&
        grep -qx "$M/man1/ddptrain.1" <<< "$out" && grep -qx "$M/man5/ddptrain-job.5" <<< "$out" &&
        grep -qx "system pages still found" <<< "$out" &&
        ok "module load ddptrain: PATH and MANPATH" || no "module load ddptrain: $out"
else
    skipped+=(lmod)
fi

[ "$fail" -eq 0 ] || exit 1
if [ ${#skipped[@]} -gt 0 ]; then
    echo "SKIP: ${skipped[*]} not installed (tools/packages.sh DDP_PKGS_TEST)"
    exit 77
fi
echo "ok: the installed prefix works on its own"
