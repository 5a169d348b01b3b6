"""test_dashboards.py's tests that start no process, apart from its tests that do (what they test: its
docstring; tests/conftest.py, "What a test uses")."""

from __future__ import annotations

import json

import pytest

from tests.test_dashboards import DASHBOARDS, panels

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboard_structure(path):
    dash = json.loads(path.read_text())
    assert dash["uid"] and dash["title"] and dash["panels"]
    names = {v["name"]: v for v in dash["templating"]["list"]}
    assert names["datasource"]["type"] == "datasource" and names["datasource"]["query"] == "prometheus"
    assert names["model_name"]["datasource"]["uid"] == "${datasource}"
    ps = panels(dash)
    ids = [p["id"] for p in ps]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    boxes = []
    for p in ps:
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert refs and all(refs) and len(refs) == len(set(refs)), p["title"]
        for t in p["targets"]:
            assert t["datasource"]["uid"] == "${datasource}" and t["expr"].strip(), (p["title"], t["refId"])
        g = p["gridPos"]
        assert g["x"] >= 0 and g["y"] >= 0 and 1 <= g["w"] <= 24 and g["x"] + g["w"] <= 24 and g["h"] >= 2, p["title"]
        boxes.append((g["x"], g["y"], g["x"] + g["w"], g["y"] + g["h"], p["title"]))
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            overlap = a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]
            assert not overlap, f"panels {a[4]!r} and {b[4]!r} overlap"
    assert any("$model_name" in t["expr"] for p in ps for t in p["targets"])
