#!/bin/bash
# check_source_rules.sh - tools/check-source holds the layer table of docs/architecture.md: a
# copy of the tree with one planted violation each (a higher layer included from core/, a cycle
# between folders, includes of cli/, main.c and validate/ the table does not list, a folder
# without a row, a cycle in the table itself) must fail naming the file; the real tree passes.
set -u
DDP_SRC=${DDP_SRC:?set by meson}
check="$DDP_SRC/tools/check-source"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0

"$check" "$DDP_SRC/src" >"$work/out" || { cat "$work/out"; echo "FAIL: the real tree"; fails=1; }

# plant NAME EXPECT FILE LINE: a fresh copy with LINE appended to FILE (relative to the copy's
# root), or with FILE's lines edited by the sed expression LINE when FILE is a .md;
# check-source must exit 1 and print a line matching EXPECT (grep -E)
plant() {
    local name=$1 expect=$2 file=$3 line=$4 t="$work/$1"
    mkdir -p "$t/docs"
    cp -r "$DDP_SRC/src" "$t/src"
    cp "$DDP_SRC/docs/architecture.md" "$t/docs/"
    mkdir -p "$(dirname "$t/$file")"
    case $file in
    *.md) sed -i "$line" "$t/$file" ;;
    *) printf '%s\n' "$line" >>"$t/$file" ;;
    esac
    "$check" "$t/src" >"$t/out" 2>&1
    local rc=$?
    if [ "$rc" -ne 1 ] || ! grep -qE -- "$expect" "$t/out"; then
        cat "$t/out"
        echo "FAIL: $name: exit $rc, expected 1 and a line with: $expect"
        fails=1
    else
        echo "ok: $name: $(grep -E -- "$expect" "$t/out" | head -1 | cut -c1-160)"
    fi
}

plant core-above "src/core/rng.c:" src/core/rng.c '#include "backend/backend.h"'
plant backend-dist "src/backend/cpu.c:" src/backend/cpu.c '#include "dist/world.h"'
plant cycle 'cycle between folders .*src/dist/hostlist\.c:[0-9]+ includes backend/' \
    src/dist/hostlist.c '#include "backend/backend.h"'
plant train-cli "src/train/step.c:" src/train/step.c '#include "cli/cli.h"'
plant main-c "src/main.c:" src/main.c '#include "train/train.h"'
plant validate-train "src/validate/health.c:" src/validate/health.c '#include "train/train.h"'
plant cli-unknown "src/cli/env.c:" src/cli/env.c '#include "tools/extra.h"'
plant no-row "src/extra/x.c:" src/extra/x.c '#include "core/util.h"'
plant table-cycle "allows a cycle between folders: core -> dist -> core" docs/architecture.md \
    's/^| `core\/` | nothing/| `core\/` | `dist\/`/'
[ "$fails" -eq 0 ] && echo "ok: check-source fails on each planted violation"
exit "$fails"
