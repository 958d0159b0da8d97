#!/bin/bash
# job_reference.sh - docs/job-file.md is what `ddptrain --job-reference` prints from the job
# schema (src/job/config_keys.inc): a key added or changed there must be regenerated here with
#   build/ddptrain --job-reference > docs/job-file.md
set -u
DDPTRAIN=${DDPTRAIN:?} DDP_SRC=${DDP_SRC:?}
if diff -u "$DDP_SRC/docs/job-file.md" <("$DDPTRAIN" --job-reference) > /tmp/job-reference.$$; then
    echo "ok: docs/job-file.md matches --job-reference"
    rm -f /tmp/job-reference.$$
    exit 0
fi
head -40 /tmp/job-reference.$$
rm -f /tmp/job-reference.$$
echo "FAIL: docs/job-file.md differs from ddptrain --job-reference; regenerate it"
exit 1
