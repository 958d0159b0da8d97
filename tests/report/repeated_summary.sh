#!/bin/bash
# repeated_summary.sh - report.html from a metrics.jsonl written by hand: a run that finished
# (two ranks, a real samples/s) and was then run again on one rank, which appended a second
# start and a second summary of the same step count with no samples/s (as an older ddptrain
# did). The final numbers must be the first summary's (world_size 2, samples_per_s 1234.5), the
# later one ignored; a summary of more steps (the run extended) must replace it. Times in the
# machine table and the time line are ISO 8601 UTC (2026-12-04T09:20:00Z), never 1.7964e+09.
set -u
DDPTRAIN=${DDPTRAIN:?}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }

r=$work/run
mkdir -p "$r"
start='"epoch":1,"step":0,"version":"0.1.0","launcher":"mpirun","comm":"mpi","device":"cpu",'
start+='"threads":1,"hosts":["n1"]'
cat >"$r/metrics.jsonl" <<JSONL
{"kind":"start",$start,"time":1796376000.250,"world_size":2,"resumed":false}
{"kind":"train","epoch":1,"step":10,"loss":1.5,"acc":0.4,"lr":0.1,"samples_per_s":1200.0}
{"kind":"summary","epochs":1,"steps":10,"world_size":2,"global_batch":32,"params":100,"train_s":0.3,"samples_per_s":1234.5,"test_loss":1.2,"test_acc":0.5}
{"kind":"start",$start,"time":1796379600.000,"world_size":1,"resumed":true}
{"kind":"summary","epochs":1,"steps":10,"world_size":1,"global_batch":16,"params":100,"train_s":0.3,"samples_per_s":0.0,"test_loss":1.2,"test_acc":0.5}
JSONL
"$DDPTRAIN" report "$r" >"$work/out" 2>&1 || { bad "report exited $?"; cat "$work/out"; }
h=$r/report.html
final=$(sed -n '/<h3>final numbers/,/<h3>machine/p' "$h")
if grep -qF "<tr><th>samples_per_s</th><td>1234.5</td></tr>" <<<"$final" &&
    grep -qF "<tr><th>world_size</th><td>2</td></tr>" <<<"$final" &&
    ! grep -qF "<tr><th>samples_per_s</th><td>0</td></tr>" <<<"$final"; then
    ok "a repeated summary is ignored: samples_per_s 1234.5 and world_size 2 shown"
else
    bad "final numbers: $(grep -oE '<tr><th>(samples_per_s|world_size)</th><td>[^<]*' <<<"$final" | tr '\n' ' ')"
fi
machine=$(sed -n '/<h3>machine/,/<h3>starts/p' "$h")
if grep -qF "<tr><th>time</th><td>2026-12-04T10:20:00Z</td></tr>" <<<"$machine" &&
    grep -qF "<td>2026-12-04T09:20:00Z</td>" "$h" && ! grep -qE '1\.796[0-9]*e\+09' "$h"; then
    ok "times are ISO 8601 UTC in the machine table and the time line"
else
    bad "times: $(grep -oE '<th>time</th><td>[^<]*' "$h") / $(grep -oE '1\.796[0-9]*e\+09' "$h" | head -1)"
fi

# the run extended: a summary of more steps replaces the earlier one
echo '{"kind":"summary","epochs":2,"steps":20,"world_size":1,"global_batch":16,"params":100,"train_s":0.6,"samples_per_s":999.5,"test_loss":1.1,"test_acc":0.6}' >>"$r/metrics.jsonl"
"$DDPTRAIN" report "$r" >"$work/out" 2>&1 || bad "report exited $?"
final=$(sed -n '/<h3>final numbers/,/<h3>machine/p' "$h")
if grep -qF "<tr><th>samples_per_s</th><td>999.5</td></tr>" <<<"$final" &&
    grep -qF "<tr><th>steps</th><td>20</td></tr>" <<<"$final"; then
    ok "a summary of more steps (the run extended) is the one shown"
else
    bad "extended run: $(grep -oE '<tr><th>(samples_per_s|steps)</th><td>[^<]*' <<<"$final" | tr '\n' ' ')"
fi
[ $fail -eq 0 ] && echo "repeated_summary: all passed" || echo "repeated_summary: failures"
exit $fail
