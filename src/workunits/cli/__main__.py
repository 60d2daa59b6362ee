"""``python -m workunits.cli``: the same as the ``workunits`` console script."""

from workunits.cli import main

main()
