"""`pagoda run-batch -i requests.jsonl -o results.jsonl [MODEL]`: a batch file (OpenAI's Batch API JSONL)
run offline through the server's routes (docs/batch.md)."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from pagoda.entrypoints.engine_args import DEFAULT_MODEL_HELP, add_engine_args
from pagoda.errors import PagodaError
from pagoda.plugins import get_plugin_manager

logger = logging.getLogger("pagoda.batch")


def add_parser(subparsers, parent: argparse.ArgumentParser) -> None:
    from pagoda.cli.serve_cmd import add_lora_args, add_parser_args

    p = subparsers.add_parser(
        "run-batch", parents=[parent], help="run a batch file (OpenAI's Batch API JSONL) offline",
        description="Run every request of a JSONL batch file (OpenAI's Batch API: custom_id, method, url of "
                    "/v1/chat/completions, /v1/completions, /v1/embeddings or /v1/responses, body) and write one "
                    "result record a line, in input order. A re-run skips the lines the results file already "
                    "answers. MODEL is " + DEFAULT_MODEL_HELP + ".",
    )
    p.add_argument("model", nargs="?", default=None, metavar="MODEL", help=DEFAULT_MODEL_HELP)
    g = p.add_argument_group("batch")
    g.add_argument("-i", "--input-file", required=True, metavar="PATH", help="the requests, one JSON object a line")
    g.add_argument("-o", "--output-file", required=True, metavar="PATH",
                   help="the results, appended (created if missing); lines it already answers are skipped")
    g.add_argument("--served-model-name", nargs="+", metavar="NAME",
                   help="model names the lines' body.model may use (default: MODEL as given, or the embedded "
                        "model's name)")
    g.add_argument("--max-in-flight", type=int, default=None, metavar="N",
                   help="most lines sent to the engine and not yet written (default: 2 x --max-num-seqs)")
    g.add_argument("--max-n-per-request", type=int, default=16, metavar="N", help="most choices (n) a line may ask for")
    g.add_argument("--no-progress", action="store_true", help="no progress bar (it shows on a terminal only anyway)")
    add_parser_args(p.add_argument_group("tool calling and reasoning (docs/tools.md)"))
    add_lora_args(p.add_argument_group("LoRA adapters (docs/lora.md; with --enable-lora)"), runtime_updates=False)
    add_engine_args(p, get_plugin_manager())
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pagoda.cli.serve_cmd import check_engine, core_factory, served_names
    from pagoda.engine_core.client import EngineStartError
    from pagoda.server.batch.local import BatchJob, run_batch_file

    logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per request
    try:
        _check_files(args)
        config = check_engine(args)
        window = args.max_in_flight or 2 * config.max_num_seqs
        if window < 1:
            raise ValueError(f"--max-in-flight must be >= 1, got {window}")
        if args.max_n_per_request < 1:
            raise ValueError(f"--max-n-per-request must be >= 1, got {args.max_n_per_request}")
        job = BatchJob(args.input_file, args.output_file, served_names(args), window, args.tool_call_parser,
                       args.reasoning_parser, args.max_n_per_request, False if args.no_progress else None,
                       args.log_level, core_factory(args))
        summary = run_batch_file(config, job)
    except (ValueError, OSError, PagodaError) as exc:  # ResultsFileError is a ValueError
        print(f"pagoda run-batch: {exc}", file=sys.stderr)
        return 2
    except EngineStartError as exc:
        print(f"pagoda run-batch: {exc}", file=sys.stderr)
        return 1
    logger.info("%s: %s", args.output_file, summary.describe())
    return 0


def _check_files(args: argparse.Namespace) -> None:
    if not os.path.isfile(args.input_file):
        raise ValueError(f"--input-file {args.input_file} is not a file")
    if os.path.exists(args.output_file) and os.path.samefile(args.input_file, args.output_file):
        raise ValueError("--output-file must not be the input file")
