"""Run every benchmark in one process and print their tables (``python3 dev.py bench``).

Each benchmark module has ``main(argv) -> str`` and writes its table under
``benchmarks/out/`` (ignored by git); keep a run worth recording under
``benchmarks/results/<machine>/`` and summarise it in ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path

# Every module here that is not private (``_harness``) or this runner is a benchmark;
# the report, which gathers the models over batch sizes, runs last.
BENCHMARKS = sorted(
    path.stem for path in Path(__file__).parent.glob("*.py")
    if not path.stem.startswith("_") and path.stem not in ("run", "report")
) + ["report"]


def quick_arguments(module) -> list[str]:
    """A smoke run's arguments: the module's own ``QUICK`` where it has one."""
    return list(getattr(module, "QUICK", ["--repeats", "1"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", default=BENCHMARKS,
                        help=f"benchmarks to run (default: all of {', '.join(BENCHMARKS)})")
    parser.add_argument("--quick", action="store_true", help="fewer repeats (a smoke run)")
    args = parser.parse_args()
    unknown = sorted(set(args.names) - set(BENCHMARKS))
    if unknown:
        parser.error(f"unknown benchmarks {unknown}; choose from {BENCHMARKS}")
    for name in args.names:
        module = importlib.import_module(f"benchmarks.{name}")
        module.main(quick_arguments(module) if args.quick else [])
        print()


if __name__ == "__main__":
    main()
