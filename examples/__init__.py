"""Matchbox's examples: models written for ONE example, run on batches.

Each module is runnable alone (``python examples/<name>.py --help``) and keeps its
model classes and data helpers at module level, so tests and benchmarks import them
(``from examples.adaptive_computation import ACT``).
"""
