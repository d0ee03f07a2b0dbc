"""Benchmarks behind `pagoda bench NAME`: each module here with ``add_parser(subparsers, parent)`` adds one."""
