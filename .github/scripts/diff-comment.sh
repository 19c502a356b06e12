#!/usr/bin/env bash
# Write the pull-request comment body for one stack: a marker (so later pushes update the
# same comment), the Markdown of `gpufabric diff`, and whether `pulumi preview` ran.
# Usage: diff-comment.sh STACK BASE PREVIEW OUT_FILE
#   BASE     git ref or rendered directory to diff against
#   PREVIEW  "ran" when the pulumi preview job runs for this stack, anything else = skipped
set -euo pipefail
stack="${1:?stack}"; base="${2:?base}"; preview="${3:?preview}"; out="${4:?out file}"
gpufabric="${GPUFABRIC:-.venv/bin/gpufabric}"
{
  echo "<!-- gpufabric-diff:${stack} -->"
  "$gpufabric" diff --stack "$stack" --base "$base" --format md
  echo
  if [ "$preview" = "ran" ]; then
    echo "_\`pulumi preview --diff\` for \`${stack}\` is posted by the Pulumi action in its own comment._"
  else
    echo "_\`pulumi preview\` was **skipped** for \`${stack}\`: the repository has no \`PULUMI_ACCESS_TOKEN\` and \`KUBECONFIG_PREVIEW\` secrets (or this PR comes from a fork). The diff above is computed offline from the rendered manifests._"
  fi
} > "$out"
