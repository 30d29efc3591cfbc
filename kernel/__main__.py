"""``python -m kernel`` is the ``kernel`` command."""

from kernel.cli import main

main()
