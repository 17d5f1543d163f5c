"""What a WORKDIR is fed from (glue_processor/local/source.py): remembered, never mixed."""

from __future__ import annotations

from pathlib import Path

import pytest

from contracts.exceptions import ConfigError
from glue_processor.local.layout import LocalLayout
from glue_processor.local.source import DataSource, choose, remember


def test_a_workdir_remembers_its_tree_and_never_takes_a_sample_or_another_tree(tmp_path: Path) -> None:
    layout = LocalLayout(tmp_path / "work")
    mine, other = tmp_path / "mine", tmp_path / "other"
    mine.mkdir()
    other.mkdir()
    # a new WORKDIR without DATA gets the sample; with DATA, that tree
    assert choose(layout, None) == DataSource(layout.sample, sample=True)
    remember(layout, choose(layout, mine))
    # Then without DATA it is fed the same tree again, never a sample
    assert choose(layout, None) == DataSource(mine.resolve(), sample=False)
    assert choose(layout, mine) == DataSource(mine.resolve(), sample=False)
    with pytest.raises(ConfigError, match=f"is fed from {mine.resolve()}, not {other}"):
        choose(layout, other)


def test_a_workdir_of_the_sample_refuses_a_users_tree(tmp_path: Path) -> None:
    layout = LocalLayout(tmp_path / "work")
    remember(layout, DataSource(layout.sample, sample=True))
    with pytest.raises(ConfigError, match="holds the generated sample; ingest your data in a WORKDIR of its own"):
        choose(layout, tmp_path)


def test_a_workdir_of_an_earlier_version_is_read_from_its_landing_link(tmp_path: Path) -> None:
    layout = LocalLayout(tmp_path / "work")
    layout.create()
    mine = tmp_path / "mine"
    mine.mkdir()
    layout.link_landing(mine)  # what an earlier make run left, with no state/source.json
    assert choose(layout, None) == DataSource(mine, sample=False)
