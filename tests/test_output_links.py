"""An agent's output file is a second name of its transcript (``_util.outputfile.link``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import PLANTS, assert_plant_untouched, plant
from workunits._util import outputfile

pytestmark = pytest.mark.timeout(10)

SHM = Path("/dev/shm")


def _transcript(directory: Path) -> Path:
    path = directory / "a00000001.jsonl"
    os.close(outputfile.create(str(path), append=True))
    return path


def test_the_output_is_the_transcript_under_a_second_name(tmp_path: Path) -> None:
    transcript = _transcript(tmp_path)
    output = tmp_path / "a00000001.out"

    outputfile.link(str(transcript), str(output))

    assert not output.is_symlink()
    assert output.samefile(transcript)
    assert transcript.stat().st_nlink == 2  # one inode, two names: none spent on the output
    # What the unit writes to its transcript is what a reader of its output sees.
    with transcript.open("ab") as f:
        f.write(b'{"seq": 1}\n')
    assert output.read_bytes() == b'{"seq": 1}\n'

    outputfile.remove(str(output))
    assert not output.exists()
    assert transcript.read_bytes() == b'{"seq": 1}\n'
    assert transcript.stat().st_nlink == 1


@pytest.mark.parametrize("planted", PLANTS)
def test_anything_already_at_the_output_path_is_refused(tmp_path: Path, planted: str) -> None:
    transcript = _transcript(tmp_path)
    output = tmp_path / "a00000001.out"
    plant(output, planted, tmp_path)

    with pytest.raises(outputfile.OutputFileError, match="refusing to link output"):
        outputfile.link(str(transcript), str(output))

    assert_plant_untouched(output, planted, tmp_path)
    assert transcript.stat().st_nlink == 1


def test_across_file_systems_the_output_is_a_symlink(tmp_path: Path) -> None:
    if not SHM.is_dir() or os.stat(SHM).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("needs /dev/shm on another file system than the test's tmp dir")
    scratch = Path(os.path.realpath(SHM)) / f"workunits-test-{os.getpid()}"
    scratch.mkdir(mode=0o700)
    try:
        transcript = _transcript(scratch)
        output = tmp_path / "a00000001.out"

        outputfile.link(str(transcript), str(output))  # link(2) says EXDEV here

        assert output.is_symlink()
        assert output.samefile(transcript)
        outputfile.remove(str(output))
        assert transcript.exists()
    finally:
        for child in scratch.iterdir():
            child.unlink()
        scratch.rmdir()
