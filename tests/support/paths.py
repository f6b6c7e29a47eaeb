"""Where the tests find the repository, their data files and these helpers."""

from pathlib import Path

SUPPORT = Path(__file__).resolve().parent
REPO = SUPPORT.parents[1]
DATA = REPO / "tests" / "data"
