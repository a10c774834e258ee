"""Stacks compose constructs and split the platform by lifecycle."""
