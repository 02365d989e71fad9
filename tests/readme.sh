#!/usr/bin/env bash
# Runs the README's main command (the fenced block under "## Run an example") as a user on a
# fresh machine would, from the repository root, and checks that it ran the example: so the
# README's first command cannot drift from what the code does.
set -euo pipefail
cd "$(dirname "$0")/.."
command=$(awk '/^## Run an example/ { section = 1; next }
    section && /^## / { exit }
    section && /^```/ { if (block) exit; block = 1; next }
    block { print }' README.md)
if [ -z "$command" ]; then
    echo "tests/readme.sh: README.md has no fenced block under '## Run an example'" >&2
    exit 1
fi
echo "+ $command" >&2
out=$(bash -c "$command")
echo "$out"
# graphc run's summary of the MLP: the step, then its output.
grep -q "^@mlp: ran .* nodes\? in .* ms" <<<"$out" || { echo "tests/readme.sh: no run summary in the output above" >&2; exit 1; }
grep -q "^probs: f32\[" <<<"$out" || { echo "tests/readme.sh: no output 'probs' in the output above" >&2; exit 1; }
