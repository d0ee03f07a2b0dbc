"""``python -m benchmarks.kernel_bench NAME``: run one kernel benchmark family (``--list`` names them).

A family is a module of this package with ``TIMING`` (how it times, one line), ``add_args(parser)``,
``unavailable(args)`` (why it cannot run here, or None) and ``run(args, report)``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from types import ModuleType

from benchmarks.kernel_bench import FAMILIES


def family(name: str) -> ModuleType:
    return importlib.import_module(f"benchmarks.kernel_bench.{name}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.kernel_bench", description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="list the families and exit")
    families = parser.add_subparsers(dest="name", metavar="NAME")
    for name, line in FAMILIES.items():
        module = family(name)
        p = families.add_parser(name, help=line, description=module.__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
        p.add_argument("--out", help="write the results here as JSON (benchmarks/kernel_bench/report.py: the schema)")
        p.add_argument("--small", action="store_true", help="small shapes: a smoke run (on a CPU where the family can)")
        module.add_args(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.list or not args.name:
        print("\n".join(f"{name:10s} {line}" for name, line in FAMILIES.items()))
        return 0 if args.list else 2
    module = family(args.name)
    problem = module.unavailable(args)
    if problem:
        print(f"error: {args.name}: {problem}", file=sys.stderr)
        return 2
    from benchmarks.kernel_bench.report import Report
    from benchmarks.kernel_bench.timing import measure_rates, on_gpu

    settings = {k: v for k, v in vars(args).items() if k not in ("list", "name", "out")}
    timing = module.TIMING if on_gpu() else "CPU wall time, median of a few calls (a smoke run, not a figure)"
    report = Report(args.name, settings, measure_rates(), timing, args.out)
    module.run(args, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
