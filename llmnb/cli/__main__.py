"""``python -m llmnb.cli``: the ``llmnb`` command."""
import sys

from llmnb.cli import main

sys.exit(main())
