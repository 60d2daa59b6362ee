"""``python -m workunits.zygote CONTROL_FD [MODULE...]``: run a zygote (started by a Supervisor)."""

import sys

# Preload what every unit process needs, so a fork has nothing left to import.
import workunits.runtime.child
import workunits.runtime.monitor  # the body of monitor units
import workunits.runtime.teammate  # noqa: F401 - the body of teammate units
from workunits.zygote.server import main

main(sys.argv)
