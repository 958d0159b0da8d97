#!/bin/bash
# nvml.sh - `ddptrain validate --quick`'s GPU health check on 2 twin GPUs (suite twin), through
# ddptrain's real NVML loader (dlopen of libnvidia-ml.so.1: the twin's, from build/tests/twin).
#   healthy twin GPUs: PASS, a health row per rank, every counter reported and zero
#   each fault of DDP_EMU_NVML_FAULT on one GPU: exit 1 on both ranks, one "gpu health"
#     failure naming that GPU, on the rank bound to it only, with the rule's reason; the other
#     rank's row passes
#   a fault on another host's GPU: PASS; sw thermal slowdown: a warning, PASS; lifetime
#     corrected ECC errors: reported, PASS
#   NVML absent (library not found) or failing to start: "not reported", PASS
set -u
DDPTRAIN_TWIN=${DDPTRAIN_TWIN:?} DDP_BUILD=${DDP_BUILD:?} DDP_SRC=${DDP_SRC:?}
command -v python3 >/dev/null || { echo "SKIP: python3 not installed"; exit 77; }
NVML_DIR=$DDP_BUILD/tests/twin
[ -e "$NVML_DIR/libnvidia-ml.so.1" ] || { echo "FAIL: no $NVML_DIR/libnvidia-ml.so.1"; exit 1; }
CFG=$DDP_SRC/tests/validate/fast.ini
HOST=${SLURMD_NODENAME:-$(hostname -s)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
fail=0
# shellcheck source=tests/hold_port.sh
. "$DDP_SRC/tests/hold_port.sh"
NRUNS=16
hold_ports $NRUNS || { echo "FAIL: cannot hold a port"; exit 1; }
read -ra ports <<<"$HELD_PORTS"
nrun=0

# run2 NAME LIBDIR ENV...: validate --quick on 2 ranks (rank r on twin GPU r, torchrun style),
# NVML from LIBDIR ("" : none); exit codes in rc0 rc1, output NAME.r.log, JSON NAME.json
run2() {
    local name=$1 lib=$2 pids=() port=${ports[nrun]}
    shift 2
    nrun=$((nrun + 1))
    for r in 0 1; do
        env "$@" LD_LIBRARY_PATH="$lib" RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r LOCAL_WORLD_SIZE=2 \
            MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" timeout 300 "$DDPTRAIN_TWIN" validate \
            --quick --config "$CFG" --json "$name.json" > "$name.$r.log" 2>&1 &
        pids+=($!)
    done
    wait "${pids[0]}"; rc0=$?
    wait "${pids[1]}"; rc1=$?
}

# check NAME WANT_RC PYTHON: both ranks exit WANT_RC and the JSON satisfies PYTHON (j: the
# report, g: its gpu_health rows by rank, f: its failures)
check() {
    local name=$1 want=$2 py=$3
    if [ "$rc0" != "$want" ] || [ "$rc1" != "$want" ]; then
        echo "FAIL $name: exit $rc0 $rc1 (want $want):"; cat "$name.0.log" "$name.1.log"
        fail=1
        return
    fi
    if python3 - "$name.json" "$py" <<'PY'; then
import json, sys
j = json.load(open(sys.argv[1]))
g = {x["rank"]: x for x in j["gpu_health"]}
f = j["failures"]
ok = eval("(" + sys.argv[2] + ")")
if not ok:
    print(json.dumps({"gpu_health": j["gpu_health"], "failures": f, "warnings": j["warnings"]},
                     indent=1))
sys.exit(0 if ok else 1)
PY
        echo "ok   $name: exit $want; $(grep -m1 '^FAIL gpu health' "$name.0.log" ||
            grep -m1 '^validate:' "$name.0.log")"
    else
        echo "FAIL $name: report:"; sed -n '/gpu health (NVML)/,$p' "$name.0.log"; fail=1
    fi
}

run2 clean "$NVML_DIR"
check clean 0 'sorted(g) == [0, 1] and all(x["verdict"] == "PASS" and x["reported"] and
    x["gpu"] == r and x["ecc_uncorrected_volatile"] == 0 and x["xid_events"] == 0 and
    x["remap_pending"] == 0 and x["temperature_c"] == 45 and x["slowdown_c"] == 90
    for r, x in g.items()) and not f'
grep -q "^gpu health (NVML)" clean.0.log || { echo "FAIL clean: no gpu health table"; fail=1; }

# fault_case NAME FAULT GPU PATTERN: FAULT on twin GPU GPU fails rank GPU alone with PATTERN
fault_case() {
    local name=$1 fault=$2 gpu=$3 pat=$4
    run2 "$name" "$NVML_DIR" DDP_EMU_NVML_FAULT="$fault"
    check "$name" 1 "len(f) == 1 and f[0]['rank'] == $gpu and f[0]['check'] == 'gpu health' and
        __import__('re').search(r'''$pat''', f[0]['reason']) is not None and
        g[$gpu]['verdict'] == 'FAIL' and g[1 - $gpu]['verdict'] == 'PASS'"
}
fault_case ecc "ecc:3@1" 1 "^ecc: 3 uncorrected volatile errors on GPU 1 \(00000000:01:00.0\)"
fault_case remap_pending "remap_pending@$HOST/0" 0 "^remap: a row remapping is pending on GPU 0 .*: reset the GPU$"
fault_case remap_failed "remap_failed@1" 1 "^remap: a row remapping failed on GPU 1 "
fault_case retire_pending "retire_pending@0" 0 "^retire: a page retirement is pending on GPU 0 .*reset the GPU$"
fault_case xid "xid:79@1" 1 "^xid: 1 XID event during the run on GPU 1 .*: XID 79$"
fault_case thermal "thermal@0" 0 "^clocks: held down by hw thermal slowdown during the run on GPU 0 "
fault_case power_brake "power_brake@1" 1 "^clocks: held down by hw power brake during the run on GPU 1 "
fault_case hw_slowdown "hw_slowdown@0" 0 "^clocks: held down by hw slowdown during the run on GPU 0 "
fault_case hot "hot@1" 1 "^temperature: 90 C, at or above the slowdown threshold of 90 C, on GPU 1 "

run2 other_host "$NVML_DIR" DDP_EMU_NVML_FAULT="ecc@not-$HOST/1,xid:79@not-$HOST/0"
check other_host 0 'not f and all(x["verdict"] == "PASS" for x in g.values())'
run2 sw_thermal "$NVML_DIR" DDP_EMU_NVML_FAULT="sw_thermal@1"
check sw_thermal 0 'not f and g[1]["verdict"] == "WARN" and g[0]["verdict"] == "PASS" and
    any(w.startswith("clocks: held down by sw thermal slowdown during the run on GPU 1 ")
        for w in j["warnings"])'
run2 corrected "$NVML_DIR" DDP_EMU_NVML_FAULT="corrected:5@0"
check corrected 0 'not f and g[0]["ecc_corrected_aggregate"] == 5 and g[0]["verdict"] == "PASS"'

# NVML absent: the loader finds no libnvidia-ml.so.1 (a driver's elsewhere on a GPU machine
# has no twin GPU: not reported either)
run2 absent ""
check absent 0 'not f and sorted(g) == [0, 1] and
    all(not x["reported"] and x["verdict"] == "n/a" for x in g.values())'
grep -q "not reported: " absent.0.log || { echo "FAIL absent: no 'not reported' row"; fail=1; }
run2 bad_list "$NVML_DIR" DDP_EMU_NVML_FAULT="ecc@"
check bad_list 0 'not f and all("nvmlInit_v2 failed" in x["status"] for x in g.values())'
exit $fail
