#!/bin/bash
# profile.sh - `ddptrain profile` on one twin GPU (suite twin): a residual CNN under tf32, so
# channels-last (the input's copy is a row) with the GPU's fusions (conv2d + relu + maxpool,
# batchnorm + relu, residual join + relu, linear + relu): every layer has its row, the fused
# partners name the layer that runs them, the header names the twin and says that each row
# includes one device synchronisation, and the JSON agrees.
set -u
DDPTRAIN_TWIN=${DDPTRAIN_TWIN:?} DDPTRAIN=${DDPTRAIN:?} DDP_SRC=${DDP_SRC:?}
PY=/usr/bin/python3
. "$DDP_SRC/tests/lib.sh"
enter_workdir
"$DDPTRAIN" data synth -o d.h5 --shape 3,8,8 --classes 4 --train 32 --test 8 --seed 3 \
    >/dev/null || exit 1
cat > j.ini <<INI
[data]
file = d.h5
batch_size = 4
[model]
layers = conv2d(6, 3, pad=1), relu, maxpool(2),
  residual(conv2d(6, 3, pad=1), batchnorm, relu, conv2d(6, 3, pad=1), batchnorm), relu,
  flatten, linear(8), relu, linear(4)
[train]
precision = tf32
INI
if ! DDP_EMU_GPUS=1 timeout 240 "$DDPTRAIN_TWIN" profile j.ini --steps 2 --warmup 1 \
        --json p.json > out.txt 2> err.txt; then
    echo "FAIL: profile on the twin exited $?:"; cat err.txt out.txt; exit 1
fi
cat out.txt err.txt
$PY - out.txt p.json <<'PYEOF'
import json, sys
text = open(sys.argv[1]).read()
js = json.load(open(sys.argv[2]))
ok = True
def check(cond, what):
    global ok
    print(("ok   " if cond else "FAIL ") + what)
    ok = ok and cond
lines = text.splitlines()
check("GPU twin" in lines[0] and "precision tf32" in lines[0], "runs on the GPU twin in tf32")
check("every row's time includes one synchronisation" in text, "states the synchronisation")
check("channels-last" in text and js["channels_last"], "channels-last, the input's copy a row")
check(any(l.startswith("input ") for l in lines), "the input's relayout has its row")
want = ["1", "2", "3", "4.1", "4.2", "4.3", "4.4", "4.5", "4", "5", "6", "7", "8", "9"]
check([l["pos"] for l in js["layers"]] == want, "every layer in the JSON")
rows = {l.split()[0]: l for l in lines if l.split() and l.split()[0] in want}
check(list(rows) == want, "every layer in the table")
L = {l["pos"]: l for l in js["layers"]}
# conv2d + relu + maxpool: the relu's and the pool's forward run in the conv2d's call
check(L["2"]["fwd_runner"] == "1" and L["3"]["fwd_runner"] == "1", "conv2d runs relu, maxpool")
check("(fused into 1 forward, 3 backward)" in rows["2"],
      "the relu's row names its runner: " + rows["2"].strip())
check("(runs" in rows["1"], "the conv2d's row names what it runs")
# batchnorm + relu both ways
check(L["4.3"]["fwd_runner"] == "4.2" and L["4.3"]["bwd_runner"] == "4.2"
      and "(fused into 4.2)" in rows["4.3"], "the body's relu is fused into its batchnorm")
check(L["4.3"]["fwd_ms"] is None and L["4.2"]["fwd_ms"] is not None, "timed once, by its runner")
# the residual join + relu both ways
check(L["5"]["fwd_runner"] == "4" and L["5"]["bwd_runner"] == "4" and "(fused into 4)" in rows["5"],
      "the join runs its relu: " + rows["5"].strip())
check(js["per_layer_sync"] and js["step_whole_ms"] > 0, "the whole step without syncs")
check(abs(sum(l["share_pct"] for l in js["layers"]) + sum(
    100 * js[k] / js["sum_ms"] for k in ("input_ms", "zero_grad_ms", "loss_ms", "grad_sync_ms",
                                        "optimizer_ms")) - 100) < 0.01, "shares sum to 100 %")
sys.exit(0 if ok else 1)
PYEOF
