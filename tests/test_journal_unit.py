"""test_journal.py's tests that start no process, apart from its tests that do (what they test: its
docstring; tests/conftest.py, "What a test uses")."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from loadgen.outputs import journal
from tests.test_journal import _mixed_records

pytestmark = pytest.mark.unit


def test_the_columnar_journal_gives_back_every_record_as_it_was(tmp_path):
    records = _mixed_records()
    j = journal.Journal(journal.path_for(tmp_path, 0), {"t0_ns": 1, "t0_unix": 2.0, "worker": 0, "time_scale": 1.0})
    for k, rec in enumerate(records):
        j.add(rec, text=True)
        if k % 37 == 0:
            j.flush()
    j.close({"interrupted": False})
    back = journal.read(tmp_path)
    assert back.records == records and not back.cut and back.rows == len(records)


def test_a_batch_of_records_gives_the_frame_a_record_at_a_time_gives():
    """The frame is computed for a whole batch at once where every chunk carried usage, record
    by record (`_row`, which defines every figure) otherwise: both ways agree on every column."""
    from loadgen.measures import frame as frames

    records = _mixed_records()
    batch = frames.request_frame(records)
    one_by_one = pd.DataFrame([frames._row(r, None) for r in records], columns=frames.COLUMNS)

    def plain(x):
        if isinstance(x, np.ndarray):
            return x.tolist()
        return None if x is None or x is pd.NA or (isinstance(x, float) and np.isnan(x)) else x

    for col in frames.COLUMNS:
        assert [plain(x) for x in batch[col]] == [plain(x) for x in one_by_one[col]], col
    assert (batch["token_count_source"] == "continuous_usage").sum() > 50  # both ways were taken
    assert (batch["token_count_source"] != "continuous_usage").sum() > 50
