"""Shared foundation: configs, registry and CLI, training scaffold, checkpoints, sharding, data, plots, results.

Only what two or more methods share lives here; a method never imports another method.
"""
