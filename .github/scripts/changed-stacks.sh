#!/usr/bin/env bash
# Print, as a JSON list, the stacks whose rendered result differs from BASE (a git ref):
# a stack file edited, a pin bumped, a template or the code changed -- whatever the cause,
# `gpufabric diff` renders both sides and reports what would change.
# Usage: changed-stacks.sh BASE_REF   (run from the repository root, after `make venv`)
set -euo pipefail
base="${1:?usage: changed-stacks.sh BASE_REF}"
gpufabric="${GPUFABRIC:-.venv/bin/gpufabric}"
changed=()
for file in stacks/Pulumi.*.yaml; do
  stack="$(basename "$file" .yaml)"
  stack="${stack#Pulumi.}"
  items="$("$gpufabric" diff --stack "$stack" --base "$base" --format json \
    | python3 -c 'import json, sys; print(len(json.load(sys.stdin)["items"]))')"
  if [ "$items" != "0" ]; then
    changed+=("\"$stack\"")
  fi
done
(IFS=,; echo "[${changed[*]}]")
