#!/bin/bash
# profile.sh - `ddptrain profile` on the CPU (suite unit): a small residual CNN on synthetic data
#  - prints a row for every layer of the model, in the log's positions, and nothing fused (the
#    CPU backend runs each layer by itself); the shares of the rows sum to about 100 %;
#  - --json holds the same layers, the same runners and numbers, parseable;
#  - writes no output directory;
#  - bad input (no job file, a bad key, --steps 0 or garbage, --warmup -1, a missing dataset,
#    an unwritable --json, two ranks) gives one line on stderr and the documented exit code.
set -u
DDPTRAIN=${DDPTRAIN:?set by meson} DDP_SRC=${DDP_SRC:?set by meson}
PY=/usr/bin/python3
. "$DDP_SRC/tests/lib.sh"
enter_workdir
fail=0
"$DDPTRAIN" data synth -o d.h5 --shape 3,8,8 --classes 4 --train 64 --test 16 --seed 3 \
    >/dev/null || exit 1
cat > j.ini <<INI
[job]
output = out
[data]
file = d.h5
batch_size = 8
[model]
layers = conv2d(6, 3, pad=1), batchnorm, relu, maxpool(2),
  residual(conv2d(6, 3, pad=1), batchnorm, relu, conv2d(6, 3, pad=1), batchnorm), relu,
  flatten, linear(16), relu, dropout(0.1), linear(4)
[optim]
name = sgd
lr = 0.05
INI
if ! timeout 120 "$DDPTRAIN" profile j.ini --steps 3 --warmup 1 --json p.json > out.txt 2> err.txt; then
    echo "FAIL: profile exited $?:"; cat err.txt; exit 1
fi
cat out.txt
[ -s err.txt ] && { echo "FAIL: profile wrote to stderr:"; cat err.txt; fail=1; }
[ -e out ] && { echo "FAIL: profile created the output directory"; fail=1; }
$PY - out.txt p.json <<'PYEOF' || fail=1
import json, re, sys
text = open(sys.argv[1]).read().splitlines()
js = json.load(open(sys.argv[2]))
want = ["1", "2", "3", "4", "5.1", "5.2", "5.3", "5.4", "5.5", "5", "6", "7", "8", "9", "10", "11"]
kinds = ["conv2d", "batchnorm", "relu", "maxpool", "conv2d", "batchnorm", "relu", "conv2d",
         "batchnorm", "residual", "relu", "flatten", "linear", "relu", "dropout", "linear"]
ok = True
def check(cond, what):
    global ok
    print(("ok   " if cond else "FAIL ") + what)
    ok = ok and cond
head = next(i for i, l in enumerate(text) if l.startswith("layer "))
end = next(i for i, l in enumerate(text) if "sum of the rows" in l)
rows = [l.split() for l in text[head + 2:end] if not l.startswith("-")]
check([r[0] for r in rows] == want, "the table has every layer in order: %s" % [r[0] for r in rows])
check([r[1] for r in rows] == kinds, "each row names its kind")
check("conv2d -> 6x8x8" in text[head + 2], "kind with shape: %r" % text[head + 2])
check(not any("fused" in l for l in text), "nothing fused on the CPU")
shares = [float(l.split()[-1]) for l in text[head + 2:end]]
check(abs(sum(shares) - 100) < 1.5, "shares sum to about 100 %% (%.1f)" % sum(shares))
check("timing: host clock around each layer" in "\n".join(text), "the method is stated")
m = re.search(r"step, whole .*: ([0-9.]+) ms \(median\) = ([0-9]+) samples/s", "\n".join(text))
check(m is not None and float(m.group(1)) > 0, "the whole step and samples/s")
L = js["layers"]
check([l["pos"] for l in L] == want, "the JSON has the same layers")
check(all(l["fwd_runner"] == l["pos"] for l in L if l["pos"] != "7"),
      "every layer runs its own forward")
flat = L[want.index("7")]
check(flat["fwd_ms"] is None and flat["fwd_runner"] is None, "flatten is a view: no time")
check(L[0]["bwd_ms"] is not None and L[-1]["fwd_ms"] > 0, "times in the JSON")
for r, l in zip(rows, L):
    if l["fwd_ms"] is not None and abs(float(r[4]) - l["fwd_ms"]) > 0.0011:
        check(False, "table and JSON agree on layer %s" % l["pos"])
jshare = sum(l["share_pct"] for l in L) + sum(
    100 * js[k] / js["sum_ms"] for k in ("zero_grad_ms", "loss_ms", "grad_sync_ms", "optimizer_ms"))
check(abs(jshare - 100) < 0.01, "JSON shares sum to 100 %% (%.3f)" % jshare)
check(js["steps"] == 3 and js["warmup"] == 1 and js["batch"] == 8 and js["samples_per_s"] > 0,
      "JSON: steps, warm-up, batch, samples/s")
sys.exit(0 if ok else 1)
PYEOF

# bad NAME CODE PATTERN [ENV=V ...] -- ARGS...: one line on stderr matching PATTERN, exit CODE
bad() {
    local name=$1 code=$2 pattern=$3 envs=()
    shift 3
    while [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    env "${envs[@]}" timeout 60 "$DDPTRAIN" profile "$@" > bad-out.txt 2> bad-err.txt
    local rc=$? n
    n=$(wc -l < bad-err.txt)
    if [ $rc = "$code" ] && [ "$n" = 1 ] && grep -q -- "$pattern" bad-err.txt && [ ! -s bad-out.txt ]; then
        echo "ok   $name: exit $rc, $(cat bad-err.txt)"
    else
        echo "FAIL $name: exit $rc (want $code), $n lines on stderr (want 1, matching '$pattern'):"
        cat bad-err.txt bad-out.txt
        fail=1
    fi
}
bad "no job file" 2 "cannot open job file" -- missing.ini
bad "a bad key" 2 "train.bogus: unknown key" -- j.ini --set train.bogus=1
bad "--steps 0" 2 "steps 0: expected a whole number" -- j.ini --steps 0
bad "--steps garbage" 2 "steps ten: expected a whole number" -- j.ini --steps ten
bad "--warmup -1" 2 "warmup -1: expected a whole number" -- j.ini --warmup -1
bad "--steps without a value" 2 "steps needs a value" -- j.ini --steps
bad "a missing dataset" 3 "none.h5: cannot open" -- j.ini --set data.file=none.h5
bad "an unwritable --json" 2 "json nodir/p.json" -- j.ini --json nodir/p.json
bad "bf16 on the CPU" 2 "bf16 needs a GPU" -- j.ini --set train.precision=bf16
bad "two ranks" 2 "profile runs in one process" WORLD_SIZE=2 RANK=0 LOCAL_RANK=0 \
    LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=1 -- j.ini
exit $fail
