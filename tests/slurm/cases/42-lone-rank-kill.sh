#!/usr/bin/env bash
# kill -9 of rank 3, alone on n2: ranks 0-2 exit 5 naming it within 10 s (tests/slurm/failfast.sh).
# shellcheck source=tests/slurm/lib.sh
. "$(dirname "$0")/../lib.sh"
# shellcheck source=tests/slurm/failfast.sh
. "$(dirname "$0")/../failfast.sh"
failfast_case kill 3
