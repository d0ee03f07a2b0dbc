"""`pagoda bench {serve,throughput,latency}`: each benchmark is a module of pagoda.bench."""

from __future__ import annotations

import argparse
import importlib
import pkgutil

import pagoda.bench


def add_parser(subparsers, parent: argparse.ArgumentParser) -> None:
    p = subparsers.add_parser("bench", help="benchmarks (serving load, offline throughput, step latency)",
                              description="Run a benchmark; results print as a table and save as JSON.")
    benches = p.add_subparsers(dest="bench", metavar="BENCHMARK")
    for info in pkgutil.iter_modules(pagoda.bench.__path__):
        module = importlib.import_module(f"pagoda.bench.{info.name}")
        if hasattr(module, "add_parser"):
            module.add_parser(benches, parent)
    p.set_defaults(func=lambda args: p.print_help() or 2)
