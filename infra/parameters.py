"""The stack's parameters take the settings of what reads them as their models define them.

CloudFormation checks each parameter against its own constraints before it changes anything
(User Guide, "Parameters section syntax": ``AllowedValues``, ``AllowedPattern``, ``MinValue`` and
``MaxValue``, inclusive); a value the template lets through and a reader refuses fails there for
ever: the control plane's :class:`~lambdas.control_plane.settings.ControlSettings` on every tick (no
run of the job restarted again), the job's :class:`~glue_processor.settings.JobSettings` at every
start, the manifest Lambda's settings at every invocation. So each parameter that the control
plane's or the manifest Lambda's environment, or the job's arguments, take by ``Ref`` gets its
constraints from the fields it lands in (the tightest of them), at render time (:func:`apply`): one
contract, in the models. A whole-number field makes its parameter a ``String`` with a pattern of the
allowed numbers, since a ``Number`` parameter also takes ``2.5``. Relations between parameters are
the model's own business (``Rules`` compare no numbers: User Guide, "Rule functions"), and
:func:`check` refuses them in ``make deploy`` before the change set.
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal

from annotated_types import Ge, Gt, Le, Lt
from pydantic.fields import FieldInfo

from infra.exceptions import DeployError

FUNCTION = "ControlPlane"
JOB = "GlueJob"
# (resource, where it takes parameters, the model of its settings)
READERS = (
    (FUNCTION, "environment", "lambdas.control_plane.settings", "ControlSettings"),
    ("ManifestLambda", "environment", "lambdas.manifest_builder.settings", "BuilderSettings"),
    (JOB, "arguments", "glue_processor.settings", "JobSettings"),
)


def settings_parameters(template: dict[str, Any]) -> dict[str, str]:
    """Parameter -> the ControlSettings field its value lands in (the function's environment, by Ref)."""
    from lambdas.control_plane.settings import ControlSettings

    function = template.get("Resources", {}).get(FUNCTION, {})
    env = function.get("Properties", {}).get("Environment", {}).get("Variables", {})
    out: dict[str, str] = {}
    for var, value in env.items():
        ref = value.get("Ref") if isinstance(value, dict) else None
        if (
            isinstance(ref, str)
            and ref in template.get("Parameters", {})
            and var.lower() in ControlSettings.model_fields
        ):
            out[ref] = var.lower()
    return out


def landing_fields(template: dict[str, Any]) -> dict[str, list[tuple[str, FieldInfo]]]:
    """Parameter -> every (reader.field, field) its value lands in, by Ref, in :data:`READERS`."""
    import importlib

    out: dict[str, list[tuple[str, FieldInfo]]] = {}
    for resource, where, module, model in READERS:
        fields = getattr(importlib.import_module(module), model).model_fields
        props = template.get("Resources", {}).get(resource, {}).get("Properties", {})
        mapping = props.get("Environment", {}).get("Variables", {}) if where == "environment" else {}
        mapping = props.get("DefaultArguments", {}) if where == "arguments" else mapping
        for key, value in mapping.items():
            ref = value.get("Ref") if isinstance(value, dict) else None
            field = key.lower() if where == "environment" else key.removeprefix("--")
            if isinstance(ref, str) and ref in template.get("Parameters", {}) and field in fields:
                out.setdefault(ref, []).append((f"{resource}.{field}", fields[field]))
    return out


def apply(template: dict[str, Any]) -> None:
    """Set each such parameter's constraints from its fields: the tightest of the template's and
    the models'; and the table's name as the job takes one (:func:`table_name_pattern`)."""
    params = template["Parameters"]
    table = template["Resources"][JOB]["Properties"]["DefaultArguments"]["--table_name"]["Ref"]
    for name, fields in landing_fields(template).items():
        if name != table:
            _constrain(name, params[name], [f for _, f in fields])
    params[table]["AllowedPattern"] = table_name_pattern()


def table_name_pattern() -> str:
    """contracts.routing's table names, less the job's own folders and its own tables' names (the load
    history and the quarantine, tables of the same database, beside the stack's)."""
    from contracts.routing import RESERVED_TABLE_NAMES, TABLE_NAME_PATTERN
    from glue_processor.settings import JobSettings

    own = (JobSettings.model_fields[f].default for f in ("load_history_table", "quarantine_table"))
    taken = sorted({*RESERVED_TABLE_NAMES, *own})
    return "^(?!(" + "|".join(map(re.escape, taken)) + ")$)" + TABLE_NAME_PATTERN.removeprefix("^")


def _constrain(name: str, param: dict[str, Any], fields: list[FieldInfo]) -> None:
    kinds = [k for k in (_kind(f.annotation) for f in fields) if k is not None]
    if not kinds:
        return
    literals = [k for k in kinds if isinstance(k, tuple)]
    if literals:
        allowed = [v for v in param.get("AllowedValues", literals[0]) if all(v in k for k in literals)]
        if not allowed:
            raise ValueError(f"{name}: none of its AllowedValues is one of {list(literals[0])}")
        param["AllowedValues"] = allowed
        return
    if all(k is str for k in kinds):
        patterns = sorted({p for f in fields for p in _patterns(f)})
        if len(patterns) == 1:
            param["AllowedPattern"] = patterns[0]
        elif patterns:  # every reader's: each as a lookahead (CloudFormation takes Java's regex syntax)
            param["AllowedPattern"] = "^" + "".join(f"(?={p.removeprefix('^')})" for p in patterns) + ".*$"
        return
    kind = int if int in kinds else float
    lowest, highest = None, None
    for field in fields:
        low, high = _bounds(name, field)
        lowest = low if lowest is None else (lowest if low is None else max(lowest, low))
        highest = high if highest is None else (highest if high is None else min(highest, high))
    lowest = _tighter(max, lowest, param.pop("MinValue", None))
    highest = _tighter(min, highest, param.pop("MaxValue", None))
    if lowest is not None and highest is not None and lowest > highest:
        raise ValueError(f"{name}: no value is both >= {lowest} and <= {highest}")
    if kind is float:
        param["Type"] = "Number"
        if lowest is not None:
            param["MinValue"] = _number(lowest)
        if highest is not None:
            param["MaxValue"] = _number(highest)
        return
    low = 0 if lowest is None else int(-(-lowest // 1))  # the least whole number allowed
    high = None if highest is None else int(highest // 1)
    param["Type"] = "String"
    param["AllowedPattern"] = integer_pattern(low, high)
    param["ConstraintDescription"] = (
        f"a whole number from {low} to {high}" if high is not None else f"a whole number, at least {low}"
    )
    if "Default" in param:
        param["Default"] = str(param["Default"])


def _kind(annotation: Any) -> type | tuple[str, ...] | None:
    """int, float, str, or the values of a Literal; an optional field as its type; None for a type
    no parameter constraint can say (a list of values, a model: its reader checks it)."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1:
        annotation = args[0]
    if typing.get_origin(annotation) is Literal:
        return tuple(str(v) for v in typing.get_args(annotation))
    if annotation in (int, float, str):
        return typing.cast(type, annotation)
    return None


def _patterns(field: FieldInfo) -> list[str]:
    return [rule.pattern for rule in field.metadata if isinstance(getattr(rule, "pattern", None), str)]


def _bounds(name: str, field: FieldInfo) -> tuple[float | None, float | None]:
    lowest = highest = None
    for rule in field.metadata:
        if isinstance(rule, Gt | Lt):
            # MinValue and MaxValue are inclusive: an exclusive bound has no parameter to say it
            raise ValueError(f"{name}: give its setting an inclusive bound (ge/le), not {rule!r}")
        if isinstance(rule, Ge):
            lowest = float(typing.cast(float, rule.ge))
        if isinstance(rule, Le):
            highest = float(typing.cast(float, rule.le))
    return lowest, highest


def _number(value: float) -> int | float:
    return int(value) if value.is_integer() else value


def _tighter(pick: Any, model: float | None, template: Any) -> float | None:
    if template is None:
        return model
    return float(template) if model is None else float(pick(model, float(template)))


def integer_pattern(lowest: int, highest: int | None = None) -> str:
    """A regular expression that matches exactly the decimal whole numbers in [lowest, highest]
    (no sign, no leading zero); ``highest`` None: no upper end."""
    if lowest < 0 or (highest is not None and highest < lowest):
        raise ValueError(f"no pattern for [{lowest}, {highest}]")
    top = highest if highest is not None else 10 ** len(str(lowest)) - 1
    parts: list[str] = []
    for digits in range(len(str(lowest)), len(str(top)) + 1):
        first = max(lowest, 10 ** (digits - 1) if digits > 1 else 0)
        last = min(top, 10**digits - 1)
        parts += _same_length(str(first), str(last))
    if highest is None:
        parts.append(f"[1-9][0-9]{{{len(str(lowest))},}}")  # every longer number
    return "^(" + "|".join(parts) + ")$"


def _same_length(first: str, last: str) -> list[str]:
    """Alternatives matching the numbers from ``first`` to ``last``, both of one length."""
    if first == last:
        return [first]
    if len(first) == 1:
        return [_digits(int(first), int(last))]
    if first[0] == last[0]:
        return [first[0] + rest for rest in _same_length(first[1:], last[1:])]
    tail = len(first) - 1
    out: list[str] = []
    low, high = int(first[0]), int(last[0])
    if first[1:] != "0" * tail:  # first .. <first digit>99..9
        out += [first[0] + rest for rest in _same_length(first[1:], "9" * tail)]
        low += 1
    if last[1:] != "9" * tail:  # <last digit>00..0 .. last
        out += [last[0] + rest for rest in _same_length("0" * tail, last[1:])]
        high -= 1
    if low <= high:
        out.append(_digits(low, high) + ("[0-9]" if tail == 1 else f"[0-9]{{{tail}}}"))
    return out


def _digits(low: int, high: int) -> str:
    return str(low) if low == high else f"[{low}-{high}]"


def check(template: dict[str, Any], values: Mapping[str, str]) -> None:
    """Refuse, before the change set, what no parameter constraint can: a MinWorkers above the
    MaxWorkers (the control plane would read the pair as the range it spans, and say so)."""
    fields = {field: name for name, field in settings_parameters(template).items()}
    low_name, high_name = fields.get("min_workers"), fields.get("max_workers")
    if low_name is None or high_name is None:
        return
    low, high = str(values.get(low_name, "")), str(values.get(high_name, ""))
    if low.isdigit() and high.isdigit() and int(low) > int(high):
        raise DeployError(
            f"{low_name}={low} is above {high_name}={high}: pass {low_name} <= {high_name} "
            f"(the control plane would size the job within [{high}, {low}])"
        )
