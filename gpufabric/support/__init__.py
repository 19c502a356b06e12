"""Plumbing shared by every stage: YAML codec, templates, caches, background work."""
