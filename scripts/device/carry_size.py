"""What a device call sends, against its 64 MiB: the working tree (tracked files and untracked ones git does not
ignore) plus the folders named in `carry`. Run it here before a call that carries much:

    python3 scripts/device/carry_size.py .vllm3 .whl        # the tree + those folders; exit 1 if over the limit

The recipes keep the tree under TREE_BUDGET_MIB, so that the largest carried part (a 40 MiB part of vLLM,
scripts/device/vllm_fetch.sh) fits beside it with room to spare; a test checks the tracked tree stays under it.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

LIMIT_MIB = 64.0  # what one call may send
LARGEST_PART_MIB = 40.0  # vllm_fetch.sh's PART_MB: a vLLM part travels alone with the tree
TREE_BUDGET_MIB = 16.0  # the tree's share: 64 - 40 - 8 of room (untracked files, a growing part)
MIB = 1 << 20


def tree_files(root: Path, tracked_only: bool = False) -> list[Path]:
    """The files a call sends from the checkout (tracked, and with tracked_only False untracked unignored ones)."""
    args = ["git", "-C", str(root), "ls-files", "-z", "--cached"] + ([] if tracked_only else ["--others",
                                                                                              "--exclude-standard"])
    names = subprocess.run(args, capture_output=True, check=True).stdout.decode().split("\0")
    return [root / n for n in dict.fromkeys(names) if n and (root / n).is_file()]


def folder_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def largest_folders(root: Path, files: list[Path], top: int = 5) -> list[tuple[str, int]]:
    sizes: Counter[str] = Counter()
    for f in files:
        parts = f.relative_to(root).parts
        sizes["/".join(parts[:2]) if len(parts) > 2 else parts[0]] += f.stat().st_size
    return sizes.most_common(top)


def main(argv: list[str]) -> int:
    root = Path(__file__).resolve().parents[2]
    files = tree_files(root)
    tree = sum(f.stat().st_size for f in files)
    carried = {name: folder_bytes(root / name) for name in argv}
    missing = [name for name in argv if not (root / name).exists()]
    total = tree + sum(carried.values())
    print(f"tree: {tree / MIB:.1f} MiB ({len(files)} files; budget {TREE_BUDGET_MIB:.0f} MiB); largest: "
          + ", ".join(f"{name} {size / MIB:.1f}" for name, size in largest_folders(root, files)))
    for name, size in carried.items():
        print(f"carry {name}: {size / MIB:.1f} MiB" + (" (missing here)" if name in missing else ""))
    print(f"total: {total / MIB:.1f} of {LIMIT_MIB:.0f} MiB")
    if total > LIMIT_MIB * MIB:
        print("over the limit: carry fewer folders in this call, or ignore what need not travel "
              "(.git/info/exclude)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
