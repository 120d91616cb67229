"""`python -m sweeperd`."""

import sys

from sweeperd.cli import main

sys.exit(main())
