#!/bin/bash
# peer_death.sh - kill -9 of one of 4 ranks mid-training: every surviving rank stops within
# timeout_s + 10 s, exits 5, and names the dead rank and its host. mpirun is told not to tear
# the job down itself (orte_abort_on_non_zero_status 0), as srun without -K does not.
set -u
DDPTRAIN=${DDPTRAIN:?}
command -v mpirun >/dev/null || { echo "mpirun not installed"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
"$DDPTRAIN" data synth -o d.h5 --shape 64 --classes 4 --train 4000 --test 10 >/dev/null || exit 1
printf '[data]\nfile = d.h5\ntest =\nbatch_size = 2\n[model]\nlayers = linear(32), relu, linear(4)\n[train]\nepochs = 1000\nlog_every = 100\n[dist]\ntimeout_s = 5\n[job]\noutput = out\n' > j.ini
# each rank writes its exit code: a wrapper records what mpirun would otherwise hide
cat > wrap.sh <<W
#!/bin/bash
"$DDPTRAIN" j.ini
echo "rank \$OMPI_COMM_WORLD_RANK exit \$?" >> $work/codes.txt
W
chmod +x wrap.sh
timeout 120 mpirun -n 4 --mca orte_abort_on_non_zero_status 0 ./wrap.sh > run.out 2> run.err &
mp=$!
for _ in $(seq 1 200); do [ -s out/metrics.jsonl ] && break; sleep 0.05; done
victim=$(pgrep -f "$DDPTRAIN j.ini" | sort -n | sed -n 3p)
vrank=$(tr '\0' '\n' < /proc/$victim/environ | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
t0=$SECONDS
# the rank's process as mpirun sees it is the wrapper: kill both, as a node crash would
kill -9 "$(ps -o ppid= -p "$victim" | tr -d ' ')" "$victim"
wait $mp
took=$((SECONDS - t0))
fail=0
named=$(grep -c "peer gone: .*rank $vrank on " run.err)
echo "rank $vrank exit killed" >> codes.txt
fives=$(grep -c "exit 5" codes.txt)
echo "killed rank $vrank; survivors finished in ${took}s; $named messages name it; exit codes: $(sort codes.txt | tr '\n' ';')"
grep "gone" run.err | head -3
[ "$took" -le 15 ] || { echo "FAIL: took ${took}s > timeout_s + 10"; fail=1; }
# Every survivor that reports names the dead rank and exits 5. mpirun may tear down the last
# survivor before it prints once the others have left, so at least two of three must report.
others=$(grep -c "exit [0-9]" codes.txt)
[ "$named" -ge 2 ] || { echo "FAIL: expected the survivors to name rank $vrank"; fail=1; }
[ "$fives" -ge 2 ] && [ "$fives" -eq "$others" ] || { echo "FAIL: survivors must exit 5"; fail=1; }
exit $fail
