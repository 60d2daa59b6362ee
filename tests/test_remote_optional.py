"""Ray is optional: ``import workunits`` never imports it, and a remote unit says what to install.

These run without Ray installed (and with it: the subprocess hides it).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_import_workunits_does_not_import_ray() -> None:
    done = run_python(
        """
        import sys
        import workunits
        assert "ray" not in sys.modules, "import workunits imported ray"
        """
    )
    assert done.returncode == 0, done.stderr


def test_remote_without_ray_names_the_extra_and_registers_nothing(tmp_path: Path) -> None:
    done = run_python(
        f"""
        import sys
        sys.modules["ray"] = None  # as if it were not installed
        import workunits as wu

        class Helper:
            def on_receive(self, message):
                return message

        with wu.Supervisor({str(tmp_path / "state")!r}, install_signal_handlers=False) as sup:
            for start in (lambda: sup.remote(len, "abc"),
                          lambda: sup.teammate(Helper, remote=True)):
                try:
                    start()
                except wu.SpecError as exc:
                    print(exc)
                else:
                    raise AssertionError("a remote unit started without Ray")
            assert sup.list() == [], sup.list()
        """
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 2
    for line in lines:
        assert 'pip install "workunits[ray]"' in line
