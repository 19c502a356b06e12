"""The stack model: what a user writes, its strict loading and validation, the pins."""
