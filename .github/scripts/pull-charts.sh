#!/usr/bin/env bash
# Pull every Helm chart manifests/versions.yaml pins into DIR (for `make conformance`).
set -euo pipefail
dir="${1:?usage: pull-charts.sh DIR}"
mkdir -p "$dir"
.venv/bin/python - "$dir" <<'PY'
import subprocess, sys
from gpufabric.versions import load_catalog

target = sys.argv[1]
for c in load_catalog().components.values():
    if c.source != "helm" or not c.repository or not c.chart:
        continue
    if c.repository.startswith("oci://"):
        cmd = ["helm", "pull", f"{c.repository.rstrip('/')}/{c.chart}", "--version", c.version]
    else:
        cmd = ["helm", "pull", c.chart, "--repo", c.repository, "--version", c.version]
    subprocess.run([*cmd, "--destination", target], check=True)
PY
