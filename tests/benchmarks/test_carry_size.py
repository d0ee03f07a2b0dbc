"""The device calls' transfer budget (scripts/device/carry_size.py): the tracked tree stays under the share the
recipes leave it, so that a 40 MiB part of vLLM still travels beside it in one 64 MiB call."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts" / "device"))

import carry_size  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs a git checkout")


def test_the_tracked_tree_fits_its_share_of_a_call():
    files = carry_size.tree_files(ROOT, tracked_only=True)
    size = sum(f.stat().st_size for f in files) / carry_size.MIB
    biggest = carry_size.largest_folders(ROOT, files)
    assert size <= carry_size.TREE_BUDGET_MIB, (
        f"the tracked tree is {size:.1f} MiB, over the {carry_size.TREE_BUDGET_MIB:.0f} MiB the device recipes leave "
        f"it (largest: {biggest}); move large raw results out of the tree or compress them")


def test_the_recipe_arithmetic_holds():
    fetch = (ROOT / "scripts/device/vllm_fetch.sh").read_text()
    part_mb = float(re.search(r'PART_MB="\$\{PART_MB:-(\d+)\}"', fetch).group(1))
    assert part_mb == carry_size.LARGEST_PART_MIB
    assert carry_size.LARGEST_PART_MIB + carry_size.TREE_BUDGET_MIB < carry_size.LIMIT_MIB


def test_a_call_over_the_limit_is_refused(monkeypatch, capsys):
    assert carry_size.main([]) == 0
    monkeypatch.setattr(carry_size, "LIMIT_MIB", 0.5)
    assert carry_size.main(["benchmarks"]) == 1
    out = capsys.readouterr()
    assert "carry benchmarks:" in out.out and "over the limit" in out.err
