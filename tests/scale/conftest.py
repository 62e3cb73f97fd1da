"""The scale tests reuse the runner tests' input builders."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "runner"))
