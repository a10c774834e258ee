from __future__ import annotations

import datetime as dt

from ops.output import table, to_json


def test_table_aligns_columns_and_wraps_multiline_cells():
    text = table(["A", "LONGER"], [["x", "one\ntwo"], [None, True]])
    assert text.splitlines() == ["A  LONGER", "-  ------", "x  one", "   two", "-  yes"]


def test_json_is_stable_and_handles_datetimes():
    assert (
        to_json({"b": 1, "a": dt.datetime(2026, 12, 2, 12, 0, tzinfo=dt.UTC)})
        == '{\n  "a": "2026-12-02T12:00:00+00:00",\n  "b": 1\n}'
    )
