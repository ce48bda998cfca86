"""``python -m marlaas`` runs the command line."""

import sys

from marlaas.cli import main

sys.exit(main())
