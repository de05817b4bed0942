"""`python -m server`: the same command as `rag`."""

import sys

from .cli import main

sys.exit(main())
