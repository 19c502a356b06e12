"""Plumbing shared by every stage: YAML codec, templates, schema checks, caches."""
