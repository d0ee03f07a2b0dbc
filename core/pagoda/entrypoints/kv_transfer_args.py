"""The KV connector flags (docs/kv_offload.md), mirroring EngineConfig's kv_offload_gib, kv_offload_dir and
kv_transfer_config."""

from __future__ import annotations

import argparse


def add_kv_transfer_args(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("KV cache beyond the device (docs/kv_offload.md)")
    g.add_argument("--kv-offload-gib", type=float, default=0.0, metavar="GIB",
                   help="keep prefix blocks the device cache evicts in this much host memory (pinned on GPUs) and "
                        "load them back for prompts that start with them, instead of recomputing (default 0: off)")
    g.add_argument("--kv-offload-dir", default=None, metavar="DIR",
                   help="with --kv-offload-gib: also write each block to a file under DIR (one per block, written "
                        "whole or not at all, verified on read), read back after the host tier evicted it or the "
                        "engine restarted")
    g.add_argument("--kv-transfer-config", default=None, metavar="JSON",
                   help='a KV connector by name, as in vLLM: \'{"kv_connector": "shared_storage", "kv_role": '
                        '"kv_producer", "kv_connector_extra_config": {"path": "/mnt/kv"}}\' (kv_role kv_producer, '
                        "kv_consumer or kv_both; built-in connectors offload, shared_storage, zmq; `pagoda plugins` "
                        "lists the installed ones)")


def kv_transfer_settings(args: argparse.Namespace) -> dict:
    return dict(kv_offload_gib=args.kv_offload_gib, kv_offload_dir=args.kv_offload_dir,
                kv_transfer_config=args.kv_transfer_config)
