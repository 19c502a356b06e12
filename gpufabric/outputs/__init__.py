"""What a Plan becomes: rendered manifests, the runbook, diffs, jobs, images."""
