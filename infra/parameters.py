"""The stack's parameters take the control plane's settings as its model defines them.

CloudFormation checks each parameter against its own constraints before it changes anything
(User Guide, "Parameters section syntax": ``AllowedValues``, ``AllowedPattern``, ``MinValue`` and
``MaxValue``, inclusive); a value the template lets through and the control plane's
:class:`~lambdas.control_plane.settings.ControlSettings` refuses would fail every tick, and no run
of the job would be restarted again. So each parameter the control plane's environment takes by
``Ref`` gets its constraints from the field it lands in, at render time (:func:`apply`): one
contract, in the model. A whole-number field makes its parameter a ``String`` with a pattern of the
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


def apply(template: dict[str, Any]) -> None:
    """Set each such parameter's constraints from its field: the tighter of the template's and the
    model's; and the table's name as the job takes one (:func:`table_name_pattern`)."""
    from lambdas.control_plane.settings import ControlSettings

    params = template["Parameters"]
    for name, field_name in settings_parameters(template).items():
        _constrain(name, params[name], ControlSettings.model_fields[field_name])
    table = template["Resources"][JOB]["Properties"]["DefaultArguments"]["--table_name"]["Ref"]
    params[table]["AllowedPattern"] = table_name_pattern()


def table_name_pattern() -> str:
    """contracts.routing's table names, less the job's own folders and its load history's name (a
    table of the same database, beside the stack's)."""
    from contracts.routing import RESERVED_TABLE_NAMES, TABLE_NAME_PATTERN
    from glue_processor.settings import JobSettings

    taken = sorted({*RESERVED_TABLE_NAMES, JobSettings.model_fields["load_history_table"].default})
    return "^(?!(" + "|".join(map(re.escape, taken)) + ")$)" + TABLE_NAME_PATTERN.removeprefix("^")


def _constrain(name: str, param: dict[str, Any], field: FieldInfo) -> None:
    kind = _kind(field.annotation)
    if kind is str:
        return
    if isinstance(kind, tuple):
        allowed = [v for v in param.get("AllowedValues", kind) if v in kind]
        if not allowed:
            raise ValueError(f"{name}: none of its AllowedValues is one of {list(kind)}")
        param["AllowedValues"] = allowed
        return
    lowest, highest = _bounds(name, field)
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


def _kind(annotation: Any) -> type | tuple[str, ...]:
    """int, float, str, or the values of a Literal; an optional field as its type."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1:
        annotation = args[0]
    if typing.get_origin(annotation) is Literal:
        return tuple(str(v) for v in typing.get_args(annotation))
    if annotation in (int, float, str):
        return typing.cast(type, annotation)
    raise ValueError(f"no CloudFormation constraint for a setting of type {annotation!r}")


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
