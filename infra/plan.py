"""What a deploy will do, shown before it does it: the change set, what it creates, what it costs.

``make plan`` prints it and applies nothing; ``make deploy`` prints it and asks (``YES=1``
applies without asking, for CI; with no terminal to ask on and no ``YES`` it refuses).
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any, Literal

from infra import prices
from infra.exceptions import DeployError

Mode = Literal["plan", "ask", "yes"]


def conditions(template: Mapping[str, Any], values: Mapping[str, str]) -> dict[str, bool]:
    """The template's conditions for the parameter ``values`` (Fn::Equals, Not, And, Or, Condition)."""
    declared = template.get("Conditions", {})
    out: dict[str, bool] = {}

    def value(node: Any) -> Any:
        if isinstance(node, dict) and "Ref" in node:
            return values.get(node["Ref"], str(template["Parameters"].get(node["Ref"], {}).get("Default", "")))
        if isinstance(node, dict):
            return holds(node)
        return str(node)

    def holds(node: Any) -> bool:
        (fn, args), *_ = node.items()
        if fn == "Condition":
            return named(args)
        if fn == "Fn::Equals":
            return bool(str(value(args[0])) == str(value(args[1])))
        if fn == "Fn::Not":
            return not holds(args[0])
        if fn == "Fn::And":
            return all(holds(a) for a in args)
        if fn == "Fn::Or":
            return any(holds(a) for a in args)
        raise DeployError(f"condition function {fn} is not understood by infra/plan.py")

    def named(name: str) -> bool:
        if name not in out:
            out[name] = holds(declared[name])
        return out[name]

    for name in declared:
        named(name)
    return out


def created(template: Mapping[str, Any], values: Mapping[str, str]) -> dict[str, str]:
    """The resources a create makes for ``values``: logical id -> type (conditions applied)."""
    holds = conditions(template, values)
    return {
        logical: res["Type"]
        for logical, res in template.get("Resources", {}).items()
        if holds.get(res.get("Condition", ""), True)
    }


def summary(changes: list[dict[str, Any]], *, stack: str, change_set: str, kind: str) -> str:
    """The change set as a table (action, logical id, type, replacement), then the resources it
    creates, by type."""
    rows = [("action", "logical id", "type", "replacement")]
    for change in changes:
        rc = change.get("ResourceChange", {})
        replacement = rc.get("Replacement", "-") if rc.get("Action") == "Modify" else "-"
        rows.append((rc.get("Action", "?"), rc.get("LogicalResourceId", "?"), rc.get("ResourceType", "?"), replacement))
    width = [max(len(r[i]) for r in rows) for i in range(3)]
    fmt = f"{{:<{width[0]}}}  {{:<{width[1]}}}  {{:<{width[2]}}}  {{}}"
    lines = [f"change set {change_set} of stack {stack} ({kind}): {len(changes)} changes"]
    lines += [fmt.format(*r) for r in rows]
    adds = Counter(r[2] for r in rows[1:] if r[0] == "Add")
    if adds:
        lines.append(
            f"creates {sum(adds.values())} resources: " + ", ".join(f"{n} {t}" for t, n in sorted(adds.items()))
        )
    return "\n".join(lines)


def costs(template: Mapping[str, Any], values: Mapping[str, str]) -> str:
    """The monthly cost table for ``values`` (the alarms counted as the template creates them)."""
    resources = template.get("Resources", {})
    made = [name for name, kind in created(template, values).items() if kind == "AWS::CloudWatch::Alarm"]
    anomaly = sum(1 for name in made if "ThresholdMetricId" in resources[name].get("Properties", {}))
    return prices.render(prices.estimate(values, alarms=len(made) - anomaly, anomaly_alarms=anomaly), values)


def reviewer(
    mode: Mode, *, template: Mapping[str, Any], values: Mapping[str, str], stack: str, ask: Callable[[str], bool] | None
) -> Callable[[list[dict[str, Any]], str, str], bool]:
    """What :func:`infra.stack.create_or_update` calls once the change set is computed: print it
    and its costs, then say whether to execute it (``plan``: never; ``yes``: always; ``ask``: the
    answer at the terminal, refused when there is none)."""

    def review(changes: list[dict[str, Any]], change_set: str, kind: str) -> bool:
        print(summary(changes, stack=stack, change_set=change_set, kind=kind))
        print(costs(template, values))
        if mode == "plan":
            print("plan only: nothing applied (make deploy applies it)")
            return False
        if mode == "yes":
            return True
        if ask is None:
            raise DeployError("not applied: no terminal to ask on; run make deploy YES=1 to apply without asking")
        return ask(f"apply this change set to stack {stack}? [y/N] ")

    return review


def terminal_prompt() -> Callable[[str], bool] | None:
    """A y/N question on the terminal, or ``None`` when stdin is not one (CI, a pipe)."""
    if not sys.stdin.isatty():
        return None
    return lambda question: input(question).strip().lower() in {"y", "yes"}


# The rows of the change set the README's example shows (the rest are elided as "...").
EXAMPLE_ROWS = ("Key", "AccessLogsBucket", "OutputBucket", "GlueDatabase", "IcebergTable", "GlueJob", "ControlPlane")


def example(template: Mapping[str, Any]) -> str:
    """What ``make plan`` prints for a first create with the template's defaults, rows elided: the
    README's deploy section shows it (``python -m infra.plan`` prints it; a test compares)."""
    values = {k: str(v["Default"]) for k, v in template["Parameters"].items() if "Default" in v}
    changes = [
        {"ResourceChange": {"Action": "Add", "LogicalResourceId": k, "ResourceType": v}}
        for k, v in created(template, values).items()
    ]
    lines = summary(changes, stack="ndjson-ingest", change_set="deploy-1764201600", kind="CREATE").splitlines()
    shown, out = lines[:2], []
    for line in lines[2:-1]:
        if line.split()[1] in EXAMPLE_ROWS:
            out.append(line)
        elif out[-1:] != ["..."]:
            out.append("...")
    return "\n".join([*shown, *out, lines[-1], costs(template, values)])


if __name__ == "__main__":
    from infra.build import render

    print(example(render()))
