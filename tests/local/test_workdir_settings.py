"""What a WORKDIR remembers between runs is what the README says it remembers (a newcomer ran
ON_DELETE=retract once and found every later run retracting: the README named three settings of
the six kept). Run without Spark: the settings are kept before anything runs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from glue_processor.local import cli
from glue_processor.local.layout import LocalLayout
from tests.local.test_first_hour import ROOT

GIVEN = {
    "TABLE_FORMAT": ("--table-format", "hive-parquet", "table_format"),
    "PARTITION_BY": ("--partition-by", "day(ts)", "partition_by"),
    "SCHEMA": ("--schema", "types.json", "schema"),
    "EXPECT": ("--expect", "rules.json", "expect"),
    "ON_OVERWRITE": ("--on-overwrite", "append", "on_overwrite"),
    "ON_DELETE": ("--on-delete", "retract", "on_delete"),
}


def _settings(argv: list[str], layout: LocalLayout) -> tuple[object, dict[str, str]]:
    args = cli.parse_args(["--workdir", str(layout.workdir), *argv])
    known = cli._table_settings(args, layout)
    (layout.state / "table.json").write_text(json.dumps(known), encoding="utf-8")  # as a valid run keeps them
    return args, known


def test_a_bare_rerun_reuses_each_setting_the_readme_says_a_workdir_remembers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    layout = LocalLayout(tmp_path / "work")
    layout.state.mkdir(parents=True)
    (tmp_path / "types.json").write_text("{}")
    (tmp_path / "rules.json").write_text("{}")
    # Given a first run that sets every one of them
    argv = [x for flag, value, _ in GIVEN.values() for x in (flag, str(tmp_path / value) if "." in value else value)]
    _settings(argv, layout)
    capsys.readouterr()
    # When the next run gives none
    args, _ = _settings([], layout)
    said = capsys.readouterr().out
    # Then it reuses each one, and says so on its one line
    reused = set()
    for name, (_, value, attr) in GIVEN.items():
        got = getattr(args, attr)
        if str(got).endswith(value):
            reused.add(name)
            assert f"{name}=" in said, (name, said)
    # And the README names exactly those, in its sentence on what a WORKDIR remembers
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    sentence = re.search(r"A WORKDIR remembers its (.+?) as it does its `DATA`", readme, re.S)
    assert sentence is not None
    assert set(re.findall(r"`([A-Z_]+)`", sentence.group(1))) == reused == set(GIVEN)
    # And the line gives the way back of each one it reuses, and says the table format stays (a
    # newcomer read "give another to change it" for TABLE_FORMAT, and another was refused)
    for name, reset in cli.RESETS.items():
        assert reset in said and f"`{reset}`" in readme, (name, said)
    assert "a WORKDIR keeps its TABLE_FORMAT" in said


@pytest.mark.parametrize(
    ("flag", "back", "attr"), [("--on-delete", "keep", "on_delete"), ("--on-overwrite", "replace", "on_overwrite")]
)
def test_the_way_back_the_readme_gives_is_remembered_too(tmp_path: Path, flag: str, back: str, attr: str) -> None:
    layout = LocalLayout(tmp_path / "work")
    layout.state.mkdir(parents=True)
    _settings(["--on-delete", "retract", "--on-overwrite", "append"], layout)
    # When a run gives the default back (README: ON_OVERWRITE=replace and ON_DELETE=keep)
    _settings([flag, back], layout)
    # Then the next bare run uses the default
    args, _ = _settings([], layout)
    assert getattr(args, attr) == back
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"`{flag.removeprefix('--').replace('-', '_').upper()}={back}`" in readme


def test_a_setting_given_anew_is_said_with_what_it_does(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # (a newcomer gave ON_DELETE=retract after a deletion was processed under keep: the run said
    # nothing of the change, nor that the deletion already processed kept its rows)
    layout = LocalLayout(tmp_path / "work")
    layout.state.mkdir(parents=True)
    _settings(["--on-delete", "keep", "--partition-by", "day(ts)"], layout)
    assert "changes from" not in capsys.readouterr().out  # a first run sets them: nothing changes
    _settings(["--on-delete", "retract", "--partition-by", "day(ts)"], layout)
    said = capsys.readouterr().out
    assert "this WORKDIR's ON_DELETE changes from keep to retract: batches from now on follow it" in said
    assert "what earlier ones loaded stays as it is" in said and "PARTITION_BY changes" not in said
    _settings(["--partition-by", "default"], layout)
    assert "PARTITION_BY changes from day(ts) to the default" in capsys.readouterr().out


def test_a_tilde_path_is_the_home_folder_whatever_the_shell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The README's `make run DATA=~/exports`: bash expands the ~ on a make command line, zsh (macOS's
    # shell) passes it as it is, and the run looked for a folder named "~" in the clone
    monkeypatch.setenv("HOME", str(tmp_path))
    args = cli.parse_args(["--data", "~/exports", "--workdir", "~/.work-exports", "--schema", "~/types.json"])
    assert (args.data, args.workdir, args.schema) == (
        tmp_path / "exports",
        tmp_path / ".work-exports",
        tmp_path / "types.json",
    )
