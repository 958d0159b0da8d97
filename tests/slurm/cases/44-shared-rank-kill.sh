#!/usr/bin/env bash
# kill -9 of rank 1, which shares n1 with ranks 0 and 2: Slurm would end the step by itself, but
# the ranks must first each exit 5 naming rank 1, within 10 s (tests/slurm/failfast.sh).
# shellcheck source=tests/slurm/lib.sh
. "$(dirname "$0")/../lib.sh"
# shellcheck source=tests/slurm/failfast.sh
. "$(dirname "$0")/../failfast.sh"
failfast_case kill 1
