"""``python -m helix_dbos.cli``: the ``helix-dbos`` command."""

import sys

from . import main

sys.exit(main())
