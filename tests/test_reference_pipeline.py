"""The pipeline picture and stage table (docs/reference/pipeline.svg, pipeline.md) are drawn from
the stage registry: every stage with the tables it writes, an arrow per input; a stage added to
the registry appears, so the committed picture cannot drift (tests/test_reference.py checks the
committed files are what the code draws)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

from kohaku.runner.pipeline import stage_graph
from kohaku.tools import reference

PAGES = Path(__file__).resolve().parents[1] / "docs" / "reference"
NS = "{http://www.w3.org/2000/svg}"


def test_the_registry_as_plain_data():
    stages = {st["name"]: st for st in stage_graph()}
    assert list(stages)[:2] == ["parse", "questions"] and list(stages)[-1] == "score"
    assert stages["parse"]["outputs"] == ["documents", "blocks", "figures"]
    assert stages["retrieve"]["inputs"][:4] == ["plan", "tree", "embed", "index"]
    assert "submission.csv" in stages["vote"]["files"] and "retrieve" in stages["retrieve"]["config_keys"]


def test_every_stage_its_tables_and_an_arrow_per_input_are_drawn():
    stages = stage_graph()
    svg = ET.fromstring((PAGES / "pipeline.svg").read_text(encoding="utf-8"))
    texts = [t.text for t in svg.iter(f"{NS}text")]
    for st in stages:
        assert st["name"] in texts
        writes = next(texts[i + 1] for i, t in enumerate(texts) if t == st["name"])
        assert all(table in writes for table in st["outputs"]), (st["name"], writes)
    arrows = [p for p in svg.iter(f"{NS}path") if p.get("marker-end")]
    assert len(arrows) == sum(len(st["inputs"]) for st in stages)
    page = (PAGES / "pipeline.md").read_text(encoding="utf-8")
    assert [m for m in re.findall(r"^\| \*\*(\w+)\*\* \|", page, re.M)] == [st["name"] for st in stages]


def test_a_new_stage_is_drawn():
    stages = stage_graph() + [{"name": "audit", "inputs": ["vote", "parse"], "outputs": ["findings"],
                               "files": [], "config_keys": ["audit"], "doc": "audit stage: checks."}]
    svg = reference.pipeline_svg(stages)
    assert ">audit</text>" in svg and "writes findings" in svg
    assert svg.count('marker-end="url(#arrow)"') == sum(len(st["inputs"]) for st in stages)
    assert "| **audit** | vote: answers; parse: documents, blocks, figures | findings | `audit` |" in \
        reference.pipeline_page(stages)
    assert reference.pipeline_svg(stages) != (PAGES / "pipeline.svg").read_text(encoding="utf-8")
