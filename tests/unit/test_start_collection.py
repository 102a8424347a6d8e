"""The garbage collector is paused while a process starts and back on once it is up."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from atlas.process import freeze_long_lived_objects, pause_collection_while_starting


@pytest.fixture
def collector_restored() -> Iterator[None]:
    enabled, threshold = gc.isenabled(), gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)
    (gc.enable if enabled else gc.disable)()


@pytest.mark.usefixtures("collector_restored")
def test_collection_paused_at_start_resumes_once_the_process_is_up() -> None:
    pause_collection_while_starting()
    assert not gc.isenabled()
    freeze_long_lived_objects()
    assert gc.isenabled(), "a daemon left without collection would leak every cycle"
    assert gc.get_freeze_count() > 0
