#!/usr/bin/env bash
# SIGSTOP of rank 3, alone on n2 (it keeps its sockets but sends no heartbeat): ranks 0-2 exit 5
# naming it within 10 s (tests/slurm/failfast.sh).
# shellcheck source=tests/slurm/lib.sh
. "$(dirname "$0")/../lib.sh"
# shellcheck source=tests/slurm/failfast.sh
. "$(dirname "$0")/../failfast.sh"
failfast_case stop 3
