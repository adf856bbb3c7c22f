"""Fixtures shared across test files.

``book_html`` builds the Jupyter Book once per test session (every chapter executed by pipeline_kit,
warnings as errors), so test_book.py, test_book_browser.py and test_static_explorer.py read the
same build.  To check a build you already have (while writing the book), point
``PIPELINE_KIT_BOOK_HTML`` at its ``_build/html`` folder; the build is then skipped.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def book_html(tmp_path_factory) -> Path:
    """The book built once per test session (every chapter executed, warnings as errors): its html folder."""
    if os.environ.get("PIPELINE_KIT_BOOK_HTML"):
        return Path(os.environ["PIPELINE_KIT_BOOK_HTML"]).resolve()
    out = tmp_path_factory.mktemp("book")
    exe = Path(sys.executable).with_name("jupyter-book")
    cmd = [str(exe), "build", str(ROOT / "book"), "--path-output", str(out), "-W", "-n", "--keep-going"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    return out / "_build" / "html"
