"""`python3 dev.py bench` (benchmarks/run.py) runs every benchmark module in one process:
each must take its arguments as a list, and parse its smoke run's (`--quick`)."""

from __future__ import annotations

import importlib
import inspect

import pytest

from benchmarks import run

PARSED_BY_ARGPARSE = [name for name in run.BENCHMARKS if name != "eager_ops"]


@pytest.mark.parametrize("name", run.BENCHMARKS)
def test_every_benchmark_takes_its_arguments_as_a_list(name):
    main = importlib.import_module(f"benchmarks.{name}").main
    assert list(inspect.signature(main).parameters) == ["argv"]


@pytest.mark.parametrize("name", PARSED_BY_ARGPARSE)
def test_every_benchmark_parses_its_quick_arguments(name, monkeypatch):
    # Stop at the parse: argparse exits (status 2) on an argument it does not know.
    import argparse

    module = importlib.import_module(f"benchmarks.{name}")
    parsed = []

    def stop(parser, args=None, namespace=None):
        parsed.append(argparse.ArgumentParser.parse_known_args(parser, args, namespace))
        raise KeyboardInterrupt

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", stop)
    with pytest.raises(KeyboardInterrupt):
        module.main(run.quick_arguments(module))
    [(_, unknown)] = parsed
    assert unknown == []
