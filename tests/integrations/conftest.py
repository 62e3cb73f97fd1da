"""lm-evaluation-harness runs here read only local files: tasks from a temporary folder, the model
from the tiny checkpoint fixture."""

from __future__ import annotations

import os

# Set before datasets and lm_eval are imported (they read these once), so that nothing even
# tries the network.
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["HF_HUB_OFFLINE"] = "1"
