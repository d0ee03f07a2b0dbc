"""`pagoda router --prefill URL... --decode URL...`: disaggregated prefill in front of Pagoda servers."""

from __future__ import annotations

import argparse


def add_parser(subparsers, parent: argparse.ArgumentParser) -> None:
    p = subparsers.add_parser(
        "router", parents=[parent], help="send each request's prefill to one server and its decode to another",
        description="An OpenAI-compatible front for disaggregated prefill (docs/kv_offload.md): each request of "
                    "/v1/completions and /v1/chat/completions is prefilled on a --prefill server (started with "
                    "a kv_producer KV connector), then generated on a --decode server (a kv_consumer), whose "
                    "response, streamed or not, is the client's.",
    )
    p.add_argument("--prefill", nargs="+", required=True, metavar="URL",
                   help="prefill servers (pagoda serve ... --kv-transfer-config with kv_role kv_producer), in turn")
    p.add_argument("--decode", nargs="+", required=True, metavar="URL",
                   help="decode servers (kv_role kv_consumer), in turn")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    p.add_argument("--port", type=int, default=8000, help="TCP port")
    p.add_argument("--timeout", type=float, default=600.0, metavar="SECONDS",
                   help="the longest a server may take to answer (default 600)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from pagoda.router.app import Backends, build_app

    app = build_app(Backends(args.prefill, args.decode), args.timeout)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)
    return 0
