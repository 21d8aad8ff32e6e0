"""``python -m memd.cli``."""

from memd.cli import main

main()
