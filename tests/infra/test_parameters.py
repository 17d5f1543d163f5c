"""The stack's parameters and the control plane's settings agree (issue 42, item 3).

CloudFormation checks a parameter's value against its ``AllowedValues``, ``AllowedPattern``,
``MinValue``/``MaxValue`` (inclusive) and ``MinLength``/``MaxLength``, and the template's ``Rules``,
before it creates or changes anything (CloudFormation User Guide, "Parameters section syntax" and
"Template rules"). A value it lets through reaches the control plane's environment exactly as the
``ControlPlane`` function's ``Environment`` maps it; if ``ControlSettings`` refused it there, every
tick would fail and the job would never be restarted. So: every value the rendered template allows
loads, and whatever the control plane refuses the template refuses.

Assumption: a ``Number`` parameter's value is written in decimal notation (what ``make deploy
PARAMS=`` and the console take); what other spellings CloudFormation accepts is not documented.
"""

from __future__ import annotations

import os
import re
from decimal import Decimal
from typing import Any
from unittest import mock

import pytest
from botocore.stub import Stubber
from hypothesis import HealthCheck, assume, given, note, settings
from hypothesis import strategies as st

from contracts.exceptions import ConfigError
from infra import concurrency, parameters
from infra.build import render
from infra.exceptions import DeployError
from lambdas.control_plane.decision import JobView, Observation, decide
from lambdas.control_plane.settings import ControlSettings, load_settings

T = render()
P: dict[str, Any] = T["Parameters"]
ENV: dict[str, Any] = T["Resources"]["ControlPlane"]["Properties"]["Environment"]["Variables"]
PSEUDO = {"AWS::AccountId": "123456789012", "AWS::Region": "eu-west-1", "AWS::Partition": "aws"}
ABSENT = object()  # AWS::NoValue: the key is left out
DECIMAL = re.compile(r"-?(\d+(\.\d*)?|\.\d+)")


# -- what CloudFormation does with the template ------------------------------------------------


def resolve(node: Any, values: dict[str, str]) -> Any:
    """The value CloudFormation passes for ``node`` given the parameters' values (a resource's name
    or attribute stands as a placeholder of its own)."""
    if isinstance(node, list):
        return [resolve(n, values) for n in node]
    if not isinstance(node, dict):
        return node
    ((fn, arg),) = node.items()
    if fn == "Ref":
        if arg == "AWS::NoValue":
            return ABSENT
        return values[arg] if arg in values else PSEUDO.get(arg, f"{arg.lower()}-physical-id")
    if fn == "Fn::GetAtt":
        return f"arn:aws:placeholder:::{arg[0]}/{arg[1]}"
    if fn == "Fn::Sub":
        text = arg if isinstance(arg, str) else arg[0]

        def one(m: re.Match[str]) -> str:
            name = m[1]
            if "." in name:
                return str(resolve({"Fn::GetAtt": name.split(".", 1)}, values))
            return str(resolve({"Ref": name}, values))

        return re.sub(r"\$\{([^}!]+)\}", one, text)
    if fn == "Fn::If":
        condition, then, otherwise = arg
        return resolve(then if holds(T["Conditions"][condition], values) else otherwise, values)
    if fn == "Fn::Join":
        return arg[0].join(str(v) for v in resolve(arg[1], values))
    if fn == "Fn::Split":
        return str(resolve(arg[1], values)).split(arg[0])
    if fn == "Fn::Select":
        return resolve(arg[1], values)[int(arg[0])]
    raise AssertionError(f"this test does not resolve {fn}: teach it, or the template escapes the check")


def holds(node: Any, values: dict[str, str]) -> bool:
    """A condition's or a rule assertion's truth (the rule functions: User Guide, "Rule functions")."""
    ((fn, arg),) = node.items()
    if fn == "Fn::Equals":
        return str(resolve(arg[0], values)) == str(resolve(arg[1], values))
    if fn == "Fn::Not":
        return not holds(arg[0], values)
    if fn == "Fn::And":
        return all(holds(a, values) for a in arg)
    if fn == "Fn::Or":
        return any(holds(a, values) for a in arg)
    if fn == "Condition":
        return holds(T["Conditions"][arg], values)
    if fn == "Fn::Contains":
        return str(resolve(arg[1], values)) in [str(v) for v in resolve(arg[0], values)]
    raise AssertionError(f"this test does not evaluate {fn}: teach it, or a rule escapes the check")


def rules_hold(values: dict[str, str]) -> bool:
    for rule in T.get("Rules", {}).values():
        if "RuleCondition" in rule and not holds(rule["RuleCondition"], values):
            continue
        if not all(holds(a["Assert"], values) for a in rule["Assertions"]):
            return False
    return True


def allows(name: str, value: str) -> bool:
    """CloudFormation's check of one parameter's value against its declaration."""
    p = P[name]
    if "AllowedValues" in p and value not in [str(v) for v in p["AllowedValues"]]:
        return False
    if not p.get("MinLength", 0) <= len(value) <= p.get("MaxLength", len(value)):
        return False
    if "AllowedPattern" in p and not re.fullmatch(p["AllowedPattern"], value):
        return False
    if p["Type"] == "Number":
        if not DECIMAL.fullmatch(value):
            return False
        number = Decimal(value)
        return Decimal(str(p.get("MinValue", number))) <= number <= Decimal(str(p.get("MaxValue", number)))
    return True


def environment(values: dict[str, str]) -> dict[str, str]:
    """The control plane's environment as the template maps the parameters into it."""
    env = {var: resolve(value, values) for var, value in ENV.items()}
    return {var: str(value) for var, value in env.items() if value is not ABSENT}


def load(values: dict[str, str]) -> ControlSettings:
    with mock.patch.dict(os.environ, environment(values), clear=True):
        return load_settings()


# -- the values a parameter allows, drawn ------------------------------------------------------


def _env_safe(text: str) -> bool:
    # an environment variable's value: no NUL, encodable (os.environ refuses both)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in text


TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=30)


def _decimal(number: float) -> str:
    return format(Decimal(repr(number)), "f")


def allowed_values(name: str) -> st.SearchStrategy[str]:
    p = P[name]
    if "AllowedValues" in p:
        return st.sampled_from([str(v) for v in p["AllowedValues"]])
    if p["Type"] == "Number":
        low, high = p.get("MinValue"), p.get("MaxValue")
        whole = st.integers(
            min_value=None if low is None else int(-(-Decimal(str(low)) // 1)),
            max_value=None if high is None else int(Decimal(str(high)) // 1),
        ).map(str)
        fraction = st.floats(low, high, allow_nan=False, allow_infinity=False).map(_decimal)
        return st.one_of(whole, fraction).filter(lambda v: allows(name, v))
    text = st.from_regex(p["AllowedPattern"], fullmatch=True) if "AllowedPattern" in p else TEXT
    return text.filter(_env_safe).filter(lambda v: allows(name, v))


STACK = st.fixed_dictionaries({name: allowed_values(name) for name in P})


def parameters_of(node: Any) -> set[str]:
    """The parameters ``node`` is made of: its Refs, Fn::Sub's names, the conditions of its Fn::Ifs."""
    if isinstance(node, list):
        return set().union(*(parameters_of(n) for n in node))
    if not isinstance(node, dict):
        return set()
    found = set()
    for fn, arg in node.items():
        if fn == "Ref" and arg in P:
            found.add(arg)
        elif fn == "Fn::Sub":
            found |= set(re.findall(r"\$\{([A-Za-z0-9]+)\}", arg if isinstance(arg, str) else arg[0])) & set(P)
        elif fn in ("Fn::If", "Condition"):
            condition = arg[0] if fn == "Fn::If" else arg
            found |= parameters_of(T["Conditions"][condition])
        found |= parameters_of(arg)
    return found


# the parameters the control plane's environment is made of: any value at all is drawn for them
MAPPED = sorted(parameters_of(ENV))
ANYTHING = st.one_of(
    st.integers(-5, 5000).map(str),
    st.floats(-1e6, 1e6, allow_nan=False).map(_decimal),
    TEXT.filter(_env_safe),
)


def test_the_control_plane_environment_is_made_of_parameters() -> None:
    # (the drawing below covers them; a mapping this list misses would escape it)
    assert {"MinWorkers", "MaxWorkers", "LatencySlaSeconds", "TableName", "RoutesUri", "TableFormat"} <= set(MAPPED)
    assert set(MAPPED) <= set(P)


# -- the properties ------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(STACK)
def test_every_value_the_template_allows_loads_in_the_control_plane(values: dict[str, str]) -> None:
    # Given parameters CloudFormation accepts (each within its constraints, the rules holding)
    assume(rules_hold(values))
    note(f"environment: {environment(values)}")
    # When the control plane loads its environment, it loads (no ConfigError on every tick)
    s = load(values)
    # Then each parameter the environment takes by Ref is the setting, the workers as the range they span
    for var, node in ENV.items():
        name = node.get("Ref") if isinstance(node, dict) else None
        field = var.lower()
        if name not in P or field in ("min_workers", "max_workers"):
            continue
        given_value = values[name]
        kind = type(getattr(s, field))
        assert getattr(s, field) == (kind(given_value) if kind in (int, float) else given_value), var
    workers = sorted((int(values["MinWorkers"]), int(values["MaxWorkers"])))
    assert [s.min_workers, s.max_workers] == workers
    assert bool(s.misconfigured) == (int(values["MinWorkers"]) > int(values["MaxWorkers"]))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(STACK, st.dictionaries(st.sampled_from(MAPPED), ANYTHING, max_size=4))
def test_whatever_the_control_plane_refuses_the_template_refuses(allowed: dict[str, str], wild: dict[str, str]) -> None:
    # Given any values for the parameters the control plane's environment is made of
    values = {**allowed, **wild}
    note(f"environment: {environment(values) if all(allows(k, v) for k, v in wild.items()) else wild}")
    try:
        load(values)
    except ConfigError:
        # Then what the control plane refuses, CloudFormation has refused before the stack changed
        assert not (all(allows(k, v) for k, v in values.items()) and rules_hold(values)), values


def test_the_template_s_bounds_are_the_settings_bounds() -> None:
    # Each numeric setting's bounds, at its edges: the edge is allowed and loads, one past it is
    # refused by both (the template does not refuse what the control plane takes, nor the reverse)
    base = {name: str(p["Default"]) for name, p in P.items() if "Default" in p}
    checked = []
    for name, field_name in parameters.settings_parameters(T).items():
        field = ControlSettings.model_fields[field_name]
        for rule in field.metadata:
            edge = getattr(rule, "ge", None), getattr(rule, "le", None)
            for bound, step in ((edge[0], -1), (edge[1], +1)):
                if bound is None:
                    continue
                past = bound + step if field.annotation is int else bound + step / 2
                inside, outside = str(bound), _decimal(past) if field.annotation is float else str(past)
                assert allows(name, inside), (name, inside)
                assert not allows(name, outside), (name, outside)
                # (the workers' pair moves together: a minimum above the maximum is read otherwise)
                both = ("MinWorkers", "MaxWorkers") if field_name.endswith("_workers") else (name,)
                assert getattr(load({**base, **dict.fromkeys(both, inside)}), field_name) == bound
                with pytest.raises(ConfigError, match=field_name.upper()):
                    load({**base, **dict.fromkeys(both, outside)})
                checked.append(name)
        if field.annotation is int:  # a whole number: 2.5 workers is refused by both too
            assert not allows(name, "2.5")
    assert {"MinWorkers", "MaxWorkers", "LatencySlaSeconds", "TriggerIntervalSeconds"} <= set(checked)
    # And a choice of values is the setting's choices
    assert P["ScalingMode"]["AllowedValues"] == ["control-plane", "glue-auto-scaling"]


def test_a_stack_s_defaults_are_the_settings_defaults() -> None:
    # A deployed stack passes every parameter, so its default is what runs: LatencySlaSeconds
    # defaulted to 900 while the control plane, the README ("The SLA is 600 s") and make autoscale's
    # figures said 600, and a deploy sized and alarmed at 900 s
    for name, field_name in parameters.settings_parameters(T).items():
        default = ControlSettings.model_fields[field_name].default
        assert type(default)(P[name]["Default"]) == default, (name, P[name]["Default"], field_name, default)


def test_every_variable_the_template_sets_is_a_setting() -> None:
    # extra="ignore" reads past a misspelled variable: the setting would keep its default unseen
    unknown = {v for v in ENV if v.lower() not in ControlSettings.model_fields and not v.startswith("POWERTOOLS_")}
    assert unknown == set()


# -- the workers' range: a relation no rule can state ------------------------------------------


def test_a_minimum_above_the_maximum_is_read_as_the_range_it_spans_and_said_in_every_decision() -> None:
    # Given a stack updated outside make deploy with MinWorkers 12 > MaxWorkers 4 (CloudFormation
    # rules compare no numbers: User Guide, "Rule functions")
    base = {name: str(p["Default"]) for name, p in P.items() if "Default" in p}
    s = load({**base, "MinWorkers": "12", "MaxWorkers": "4"})
    # Then the control plane loads, sizing within [4, 12]
    assert (s.min_workers, s.max_workers) == (4, 12)
    # And every decision says how its settings were read
    from datetime import UTC, datetime

    decision = decide(Observation(), JobView("FAILED", workers=6), s, datetime(2026, 1, 1, tzinfo=UTC))
    assert decision.action == "restart"
    assert decision.inputs["misconfigured"] == "MIN_WORKERS=12 > MAX_WORKERS=4: sizing within [4, 12]"
    # And the same pair given the right way round is read as given, with nothing to say
    fine = load({**base, "MinWorkers": "4", "MaxWorkers": "12"})
    assert (fine.min_workers, fine.max_workers, fine.misconfigured) == (4, 12, ())
    quiet = decide(Observation(), JobView("FAILED"), fine, datetime(2026, 1, 1, tzinfo=UTC))
    assert "misconfigured" not in quiet.inputs


def test_make_deploy_refuses_a_minimum_above_the_maximum_before_the_change_set() -> None:
    with pytest.raises(DeployError, match=r"MinWorkers=12 is above MaxWorkers=4"):
        parameters.check(T, {"MinWorkers": "12", "MaxWorkers": "4"})
    parameters.check(T, {"MinWorkers": "4", "MaxWorkers": "4"})
    parameters.check(T, {"MinWorkers": "2", "MaxWorkers": "10"})


# -- the whole numbers' pattern ------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 5000), st.one_of(st.none(), st.integers(0, 5000)), st.integers(0, 20000))
def test_a_whole_number_pattern_matches_exactly_the_numbers_of_its_range(low: int, span: int | None, n: int) -> None:
    high = None if span is None else low + span
    pattern = parameters.integer_pattern(low, high)
    inside = n >= low and (high is None or n <= high)
    assert bool(re.fullmatch(pattern, str(n))) == inside, (pattern, n)
    # and no other spelling of a number: no sign, no leading zero, no fraction
    for spelling in (f"0{n}", f"+{n}", f"{n}.0", f" {n}"):
        assert not re.fullmatch(pattern, spelling), (pattern, spelling)


# -- reserved concurrency below the event source's maximum concurrency ----------------------------


def _no_account_call() -> Any:
    import boto3

    client = boto3.client("lambda", region_name="eu-west-1", aws_access_key_id="x", aws_secret_access_key="x")
    Stubber(client).activate()  # no response queued: a call would fail the test
    return client


def _account(limit: int) -> Any:
    import boto3

    client = boto3.client("lambda", region_name="eu-west-1", aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(client)
    stub.add_response(
        "get_account_settings",
        {"AccountLimit": {"ConcurrentExecutions": limit, "UnreservedConcurrentExecutions": limit}},
    )
    stub.activate()
    return client


def test_a_reservation_below_the_queue_s_maximum_concurrency_is_refused() -> None:
    # Lambda Developer Guide, "Configuring maximum concurrency for Amazon SQS event sources": a
    # reserved concurrency below the maximum concurrency throttles the function, and a throttled
    # message goes back to the queue, its receive counted: after maxReceiveCount it is in the DLQ
    wanted = {"ManifestLambdaReservedConcurrency": "3", "ManifestLambdaMaxConcurrency": "5"}
    refused = r"ManifestLambdaReservedConcurrency=3 is below ManifestLambdaMaxConcurrency=5"
    with pytest.raises(DeployError, match=refused):
        concurrency.check(_no_account_call(), wanted, {})
    # And a reservation at the maximum, or none, goes on to the account's check
    concurrency.check(_account(1000), {**wanted, "ManifestLambdaReservedConcurrency": "5"}, {})
    concurrency.check(_account(1000), {**wanted, "ManifestLambdaReservedConcurrency": "0"}, {})


# -- the job's arguments and the manifest Lambda's environment (review M5) ---------------------------

JOB_ARGS: dict[str, Any] = T["Resources"]["GlueJob"]["Properties"]["DefaultArguments"]
BUILDER_ENV: dict[str, Any] = T["Resources"]["ManifestLambda"]["Properties"]["Environment"]["Variables"]


def job_settings_of(values: dict[str, str]) -> Any:
    from glue_processor.settings import JobSettings, settings_from_mapping

    args = {key[2:]: resolve(node, values) for key, node in JOB_ARGS.items() if key[2:] in JobSettings.model_fields}
    return settings_from_mapping({k: str(v) for k, v in args.items() if v is not ABSENT})


def builder_settings_of(values: dict[str, str]) -> Any:
    from lambdas.manifest_builder.settings import load_settings as load_builder

    env = {var: resolve(node, values) for var, node in BUILDER_ENV.items()}
    with mock.patch.dict(os.environ, {k: str(v) for k, v in env.items() if v is not ABSENT}, clear=True):
        return load_builder()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(STACK)
def test_every_value_the_template_allows_starts_the_job_and_the_manifest_lambda(values: dict[str, str]) -> None:
    # A value the template let through and the job's settings refused failed every start of the job
    # (MaxFilesPerTrigger 10001, TargetFileMb 4096, QueryName "a b", 2.5 for a whole number): the
    # control plane restarted it, and it failed again
    assume(rules_hold(values))
    job = job_settings_of(values)
    assert job.max_files_per_trigger == int(values["MaxFilesPerTrigger"])
    assert job.query_name == values["QueryName"] and job.target_file_mb == int(values["TargetFileMb"])
    builder = builder_settings_of(values)
    assert builder.max_manifest_bytes == int(values["MaxManifestBytes"])


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("MaxFilesPerTrigger", "10001"),
        ("MaxFilesPerTrigger", "2.5"),
        ("TargetFileMb", "4096"),
        ("QueryName", "a b"),
        ("MetricsNamespace", ":x"),
        ("SnapshotRetentionHours", "0"),
        ("MaxManifestFiles", "0"),
    ],
)
def test_a_value_a_reader_refuses_is_refused_by_the_template(name: str, value: str) -> None:
    assert not allows(name, value)
