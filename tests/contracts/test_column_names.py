"""The column-name rule, checked against the service models botocore ships (Glue's and Athena's).

AWS rules encoded here: Glue Column.Name is NameString (1-255, the pattern below; the Developer
Guide's Table API page words the maximum as 255 bytes of UTF-8); Athena Column.Name is NameString
(1-128). https://docs.aws.amazon.com/glue/latest/webapi/API_Column.html,
https://docs.aws.amazon.com/athena/latest/APIReference/API_Column.html
"""

from __future__ import annotations

import re

import botocore.session
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts import column_names as C


def shape(service: str, name: str) -> dict[str, object]:
    model = botocore.session.get_session().get_service_model(service)
    return dict(model.shape_for(name).metadata)


def test_the_rule_is_the_service_models_rule() -> None:
    glue, athena = shape("glue", "NameString"), shape("athena", "NameString")
    column_name = botocore.session.get_session().get_service_model("glue").shape_for("Column").members["Name"]
    assert column_name.name == "NameString"
    assert (glue["min"], glue["max"]) == (1, 255) and (athena["min"], athena["max"]) == (1, 128)
    assert min(glue["max"], athena["max"]) == C.MAX_LENGTH and max(glue["min"], athena["min"]) == C.MIN_LENGTH
    assert glue["max"] == C.MAX_UTF8_BYTES
    assert glue["pattern"] == "[\\u0020-\\uD7FF\\uE000-\\uFFFD\\uD800\\uDC00-\\uDBFF\\uDFFF\\t]*"


def glue_accepts(name: str) -> bool:
    """Glue's pattern applied to the name's UTF-16 code units, as the service (Java) applies it."""
    units = name.encode("utf-16-le", "surrogatepass")
    chars = [int.from_bytes(units[i : i + 2], "little") for i in range(0, len(units), 2)]
    text = "".join(chr(c) for c in chars)  # lone surrogates as themselves
    return re.fullmatch("[\u0020-\ud7ff\ue000-\ufffd\ud800-\udbff\udc00-\udfff\t]*", text) is not None and all(
        not (0xD800 <= c <= 0xDBFF) or (i + 1 < len(chars) and 0xDC00 <= chars[i + 1] <= 0xDFFF)
        for i, c in enumerate(chars)
    )


@settings(max_examples=500)
@given(st.text(min_size=0, max_size=140))
def test_a_name_is_valid_exactly_when_both_services_accept_it(name: str) -> None:
    units = len(name.encode("utf-16-le", "surrogatepass")) // 2
    both = glue_accepts(name) and 1 <= units <= 128 and len(name.encode("utf-8", "surrogatepass")) <= 255
    assert C.valid_column_name(name) == both


@given(st.text(min_size=1, max_size=200), st.sampled_from(["", "__2", "__17"]))
def test_fit_keeps_a_name_within_both_limits(name: str, suffix: str) -> None:
    fitted = C.fit(name, suffix)
    assert fitted.endswith(suffix) and name.startswith(fitted[: len(fitted) - len(suffix)])
    assert C.utf16_length(fitted) <= C.MAX_LENGTH and len(fitted.encode("utf-8", "surrogatepass")) <= 255
