"""``python -m workunits``: the same as the ``workunits`` console script."""

from workunits._cli import main

main()
