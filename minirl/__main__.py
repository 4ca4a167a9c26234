"""`python -m minirl ...`: see `python -m minirl --help`."""

import sys

from .cli import main

sys.exit(main())
