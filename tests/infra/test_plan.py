"""What ``make plan`` and ``make deploy`` show before they act: the change set, what it creates, and
the monthly cost at MinWorkers and MaxWorkers (infra/plan.py, infra/prices.py)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from contracts.glue import STREAMING_WORKER_TYPES
from infra import plan, prices
from infra.build import render
from infra.exceptions import DeployError

ROOT = Path(__file__).parents[2]
TEMPLATE = render()
DEFAULTS = {k: str(v["Default"]) for k, v in TEMPLATE["Parameters"].items() if "Default" in v}


def add_changes(values: dict[str, str]) -> list[dict[str, Any]]:
    """The change set of a first create: an Add per resource the template creates for ``values``."""
    return [
        {"ResourceChange": {"Action": "Add", "LogicalResourceId": k, "ResourceType": v}}
        for k, v in plan.created(TEMPLATE, values).items()
    ]


def glue_line(values: dict[str, str]) -> prices.Line:
    return prices.estimate(values, alarms=0)[0]


def test_the_glue_job_costs_its_dpus_at_min_and_max_workers_around_the_clock() -> None:
    # AWS Glue pricing: $0.44 per DPU-hour; a G.1X worker is 1 DPU, G.025X 0.25, G.2X 2 (AWS Glue
    # Developer Guide, "AWS Glue worker types"); a month is 730 hours
    line = glue_line(DEFAULTS)
    assert (DEFAULTS["WorkerType"], DEFAULTS["MinWorkers"], DEFAULTS["MaxWorkers"]) == ("G.1X", "2", "10")
    assert (round(line.at_min, 2), round(line.at_max, 2)) == (642.40, 3212.00)
    small = glue_line({**DEFAULTS, "WorkerType": "G.025X", "MinWorkers": "2", "MaxWorkers": "4"})
    assert (round(small.at_min, 2), round(small.at_max, 2)) == (160.60, 321.20)
    assert round(glue_line({**DEFAULTS, "WorkerType": "G.2X"}).at_min, 2) == 1284.80


def test_the_estimate_prices_the_design_load_at_the_size_the_control_plane_runs_it() -> None:
    # The table said "at the design load" over a MinWorkers=2 column of $1,134: 700 GB an hour is
    # 194 MB/s, which 2 G.1X workers (one executor, 56 MB/s) cannot carry; the control plane's
    # need-based sizing plans each worker at 56 MB/s x need_utilization, plus the driver
    from lambdas.control_plane.settings import ControlSettings

    share = ControlSettings(job_name="j").need_utilization
    rate = prices.GB_PER_HOUR * 1e9 / 3600
    workers = prices.design_workers(DEFAULTS)
    assert (workers - 1) * 56e6 * share >= rate > (workers - 2) * 56e6 * share
    assert workers == 6
    assert round(glue_line(DEFAULTS).at_load, 2) == round(workers * prices.GLUE_DPU_HOUR * 730, 2) == 1927.20
    # within the stack's range, at the worker speed the stack is given
    assert prices.design_workers({**DEFAULTS, "WorkerMbPerSecond": "500"}) == 2
    assert prices.design_workers({**DEFAULTS, "WorkerMbPerSecond": "5"}) == 10
    assert prices.design_workers({**DEFAULTS, "WorkerMbPerSecond": "5", "MaxWorkers": "60"}) == 1 + 46
    # a scale-up, as the control plane makes it: a shorter SLA leaves less time to catch up after the
    # resize's dead time (review: 7 at LatencySlaSeconds=400, 11 at 300)
    assert prices.design_workers({**DEFAULTS, "LatencySlaSeconds": "400"}) == 7
    assert prices.design_workers({**DEFAULTS, "LatencySlaSeconds": "300", "MaxWorkers": "20"}) == 11
    # WorkerMbPerSecond=0 sizes by utilization alone: no need-based size, MaxWorkers, said so
    assert prices.design_workers({**DEFAULTS, "WorkerMbPerSecond": "0"}) == 10
    assert "utilization alone" in glue_line({**DEFAULTS, "WorkerMbPerSecond": "0"}).basis


def test_the_estimate_reads_the_stack_s_values_not_the_shell_s(monkeypatch: pytest.MonkeyPatch) -> None:
    # ControlSettings reads the environment: a stray variable of the control plane's in the
    # deployer's shell must neither fail make plan nor change its figures
    monkeypatch.setenv("NEED_UTILIZATION", "not a number")
    monkeypatch.setenv("LATENCY_SLA_S", "60")
    assert prices.design_workers(DEFAULTS) == 6


def test_every_worker_type_the_template_allows_has_a_price() -> None:
    allowed = TEMPLATE["Parameters"]["WorkerType"]["AllowedValues"]
    assert set(allowed) <= set(prices.DPU_PER_WORKER) and set(STREAMING_WORKER_TYPES) <= set(prices.DPU_PER_WORKER)


def test_the_cost_table_states_its_basis_and_totals_its_lines() -> None:
    text = plan.costs(TEMPLATE, DEFAULTS)
    lines = prices.estimate(DEFAULTS, alarms=23)
    total = f"${sum(x.at_min for x in lines):,.2f}"
    assert re.search(rf"^total\s+{re.escape(total)}\s", text, re.M)
    assert "us-east-1 list prices" in text and "200,000 files and 700 GB an hour" in text
    for line in lines:  # each line says what it assumes
        assert f"  {line.item}: {line.basis}" in text
    # alarms are counted as the template creates them: the EventBridge DLQ's only with EventSource=eventbridge
    assert "23 alarms, 1 dashboard" in text
    # an anomaly detection alarm is priced as three alarm metrics (Amazon CloudWatch pricing)
    three = prices.estimate(DEFAULTS, alarms=22, anomaly_alarms=1)
    cloudwatch = [(x.item, x.at_min) for x in three if x.item.startswith("CloudWatch")]
    (one,) = [x.at_min for x in lines if x.item.startswith("CloudWatch")]
    assert round(cloudwatch[0][1] - one, 2) == 0.2
    assert "24 alarms" in plan.costs(TEMPLATE, {**DEFAULTS, "EventSource": "eventbridge"})


def test_conditions_decide_what_a_create_makes() -> None:
    iceberg = plan.created(TEMPLATE, DEFAULTS)
    hive = plan.created(TEMPLATE, {**DEFAULTS, "TableFormat": "hive-parquet"})
    assert "IcebergTable" in iceberg and "HiveTable" not in iceberg and "CompactionOptimizer" in iceberg
    assert "HiveTable" in hive and "IcebergTable" not in hive and "CompactionOptimizer" not in hive


def test_the_summary_shows_action_logical_id_type_and_replacement() -> None:
    changes = [
        {
            "ResourceChange": {
                "Action": "Modify",
                "LogicalResourceId": "GlueJob",
                "ResourceType": "AWS::Glue::Job",
                "Replacement": "False",
            }
        },
        {
            "ResourceChange": {
                "Action": "Add",
                "LogicalResourceId": "NewAlarm",
                "ResourceType": "AWS::CloudWatch::Alarm",
            }
        },
    ]
    text = plan.summary(changes, stack="s", change_set="cs", kind="UPDATE").splitlines()
    assert text[0] == "change set cs of stack s (UPDATE): 2 changes"
    assert text[1].split() == ["action", "logical", "id", "type", "replacement"]
    assert text[2].split() == ["Modify", "GlueJob", "AWS::Glue::Job", "False"]
    assert text[3].split() == ["Add", "NewAlarm", "AWS::CloudWatch::Alarm", "-"]
    assert text[4] == "creates 1 resources: 1 AWS::CloudWatch::Alarm"


def test_the_reviewer_plans_applies_or_asks(capsys: pytest.CaptureFixture[str]) -> None:
    changes = add_changes(DEFAULTS)

    def review(mode: plan.Mode, ask: Any = None) -> bool:
        return plan.reviewer(mode, template=TEMPLATE, values=DEFAULTS, stack="s", ask=ask)(changes, "cs", "CREATE")

    assert review("plan") is False and review("yes") is True
    assert review("ask", lambda q: True) is True and review("ask", lambda q: False) is False
    with pytest.raises(DeployError, match="YES=1"):
        review("ask", None)
    assert "monthly cost (estimate)" in capsys.readouterr().out


def test_the_readme_shows_what_make_plan_prints_for_the_defaults() -> None:
    # Given what the code prints for a first create with the defaults (rows elided as "...")
    printed = plan.summary(add_changes(DEFAULTS), stack="ndjson-ingest", change_set="deploy-1764201600", kind="CREATE")
    code = (printed + "\n" + plan.costs(TEMPLATE, DEFAULTS)).splitlines()
    example = plan.example(TEMPLATE)
    assert [line for line in example.splitlines() if line != "..."] == [
        line for line in code if line in example.splitlines()
    ]
    # Then the README's deploy section shows exactly that
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    (block,) = re.findall(r"```\n(change set .*?)\n```", readme, re.S)
    assert block == example, "regenerate the README's example with: python -m infra.plan"
