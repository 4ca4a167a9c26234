"""For pytest only (nbval runs these lessons in CI): the lessons use their tiny SMOKE settings, offline.

Kept here so that `python -m pytest notebooks/` alone also runs in SMOKE mode; set MINIRL_SMOKE=0 to check
the full default-mode runs instead.
"""

import os

os.environ.setdefault("MINIRL_SMOKE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
