#!/bin/bash
# tools/pyvenv.sh - the test-only Python packages of tools/test-requirements.txt (TensorBoard,
# ONNX, onnxruntime; exact versions) in a venv at .cache/pyvenv over Debian's python3 with its
# system packages (numpy, h5py, torch stay Debian's; nothing of Debian's is touched).
# Creates or completes the venv when needed, then prints its python's path. Exit 77 (with
# the reason on stderr) when it cannot be installed here, e.g. without network.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${DDP_PYVENV:-$root/.cache/pyvenv}
req=$root/tools/test-requirements.txt
stamp=$venv/.requirements
if [ -x "$venv/bin/python" ] && cmp -s "$req" "$stamp"; then
    echo "$venv/bin/python"
    exit 0
fi
mkdir -p "$(dirname "$venv")"
# one installer at a time: tests that start together wait on the lock, with a deadline
exec 9>"$(dirname "$venv")/.pyvenv.lock"
flock -w 900 9 || { echo "pyvenv: another install holds the lock for 15 min" >&2; exit 77; }
if [ -x "$venv/bin/python" ] && cmp -s "$req" "$stamp"; then
    echo "$venv/bin/python"
    exit 0
fi
log=$(mktemp)
if /usr/bin/python3 -m venv --system-site-packages "$venv" >"$log" 2>&1 &&
    timeout 900 "$venv/bin/python" -m pip install --disable-pip-version-check -q -r "$req" \
        >>"$log" 2>&1; then
    cp "$req" "$stamp"
    rm -f "$log"
    echo "$venv/bin/python"
    exit 0
fi
echo "pyvenv: cannot install the test packages of $req into $venv (skipping):" >&2
tail -3 "$log" >&2
rm -f "$log"
exit 77
