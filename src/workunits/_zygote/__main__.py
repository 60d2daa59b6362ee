"""``python -m workunits._zygote CONTROL_FD [MODULE...]``: run a zygote (a Supervisor starts it)."""

import sys

# Preload what every unit process needs, so a fork has nothing left to import.
import workunits._unit.child
import workunits._unit.monitor  # the body of monitor units
import workunits._unit.teammate  # noqa: F401 - the body of teammate units
from workunits._zygote.start import main

main(sys.argv)
