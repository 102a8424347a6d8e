"""The file tools given a folder: a plain "is a folder, not a file" error (no traceback in
the log), and no file descriptor left open per call (it leaked one each, 50 calls: 9 → 59)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from atlas.tools.catalog import default_registry
from tests.helpers import make_home, run_context

CALLS = {
    "read_file": {"path": "reports"},
    "edit_file": {"path": "reports", "old_string": "a", "new_string": "b"},
    "write_file": {"path": "reports", "content": "x"},
    "attach_file": {"path": "reports"},
}


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("name", list(CALLS))
async def test_a_folder_is_refused_plainly_and_leaks_nothing(
    tmp_path: Path, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    home = make_home(tmp_path / "home")
    run = run_context(home)
    (home.bot(None).workspace / "reports").mkdir(parents=True)
    tool = default_registry().get(name)
    assert tool is not None
    first = await tool.invoke(run, CALLS[name])  # the first call may open what is cached
    before = open_descriptors()
    with caplog.at_level(logging.ERROR):
        for _ in range(50):
            result = await tool.invoke(run, CALLS[name])
    assert open_descriptors() == before
    assert result.is_error and result.text == first.text
    assert "reports is a folder, not a file" in result.text, result.text
    assert "find_files" in result.text
    assert "IsADirectoryError" not in result.text
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
