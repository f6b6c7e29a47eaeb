"""``python -m batchperf.cli``: the ``batchperf`` command without its console script."""

import sys

from batchperf.cli import main

sys.exit(main())
