"""MkDocs hook: the Benchmarks page is bench/RESULTS.md (and its plot), copied at build time.

bench/RESULTS.md stays the one source (bench/run.py's figures are written
there); the site shows it as ``benchmarks.md`` without a second copy in git.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

BENCH = Path(__file__).resolve().parent.parent / "bench"


def on_files(files: Files, config: Any) -> Files:
    """Add ``benchmarks.md`` and its images (``RESULTS.png``, ``scaling.png``, linked
    relatively) to the site."""
    text = (BENCH / "RESULTS.md").read_text(encoding="utf-8")
    files.append(File.generated(config, "benchmarks.md", content=text))
    for image in ("RESULTS.png", "scaling.png"):
        files.append(File.generated(config, image, abs_src_path=str(BENCH / image)))
    return files
