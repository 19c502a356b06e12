"""Pulumi entry point: load this stack's model and build the training fabric."""

from components.program import main

main()
