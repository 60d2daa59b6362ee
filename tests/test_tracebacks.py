"""A function defined in ``__main__`` fails in its unit: the traceback names the script.

cloudpickle renames by-value code to ``<dynamic-code>``; the call pickler keeps
the file name, so the unit's traceback points at the script and shows its lines.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent(
    """
    import json, sys
    import workunits as wu

    def helper(x):
        raise ValueError(f"bad input {x}")  # the line the traceback shows

    def body(x):
        return helper(x)

    with wu.Supervisor(sys.argv[1], install_signal_handlers=False) as sup:
        failed = sup.agent(body, 7).wait(timeout=30)
        lam = sup.agent(lambda: 1 / 0).wait(timeout=30)
        print(json.dumps({"body": failed.error, "lambda": lam.error}))
    """
)


def test_tracebacks_of_main_functions_name_the_script_and_show_its_lines(tmp_path: Path) -> None:
    script = tmp_path / "my_script.py"
    script.write_text(SCRIPT)
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "state")],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    errors = json.loads(done.stdout)
    for name in ("body", "lambda"):
        assert "<dynamic-code>" not in errors[name], errors[name]
        assert f'File "{script}"' in errors[name], errors[name]
    assert 'raise ValueError(f"bad input {x}")  # the line the traceback shows' in errors["body"]
    assert "ValueError: bad input 7" in errors["body"]
    assert "lambda: 1 / 0" in errors["lambda"]
