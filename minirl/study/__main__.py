"""`python -m minirl.study ...`, the same as `python -m minirl study ...`."""

import sys

from .cli import main

sys.exit(main())
