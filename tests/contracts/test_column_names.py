"""The column-name rule, checked against the service models botocore ships (Glue's and Athena's).

AWS rules encoded here: Glue Column.Name is NameString (1-255, the pattern below; the Developer
Guide's Table API page words the maximum as 255 bytes of UTF-8); Athena Column.Name is NameString
(1-128). https://docs.aws.amazon.com/glue/latest/webapi/API_Column.html,
https://docs.aws.amazon.com/athena/latest/APIReference/API_Column.html
"""

from __future__ import annotations

import json
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
    both = both and len(json.dumps(name)) - 2 <= C.MAX_NAME_REQUEST_BYTES  # the request bound (see the module)
    assert C.valid_column_name(name) == both


@given(st.text(min_size=1, max_size=200), st.sampled_from(["", "__2", "__17"]))
def test_fit_keeps_a_name_within_both_limits(name: str, suffix: str) -> None:
    fitted = C.fit(name, suffix)
    assert fitted.endswith(suffix) and name.startswith(fitted[: len(fitted) - len(suffix)])
    assert C.utf16_length(fitted) <= C.MAX_LENGTH and len(fitted.encode("utf-8", "surrogatepass")) <= 255


def update_table_bytes(names: list[str]) -> int:
    """The body of the UpdateTable pyiceberg's GlueCatalog sends for a table of these string columns
    (every column with its iceberg.field.* parameters, the table properties with the name mapping),
    serialized by botocore as it goes on the wire. The longest database, table and location names."""
    from botocore.serialize import create_serializer
    from pyiceberg.catalog.glue import _construct_table_input
    from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
    from pyiceberg.schema import Schema
    from pyiceberg.table.metadata import new_table_metadata
    from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
    from pyiceberg.types import NestedField, StringType

    schema = Schema(*(NestedField(i + 1, n, StringType(), required=False) for i, n in enumerate(names)))
    location = "s3://" + "b" * 63 + "/data/" + "t" * 255
    properties = {"schema.name-mapping.default": schema.name_mapping.model_dump_json()}
    metadata = new_table_metadata(schema, UNPARTITIONED_PARTITION_SPEC, UNSORTED_SORT_ORDER, location, properties)
    metadata_file = f"{location}/metadata/00001-{'0' * 36}.metadata.json"
    table_input = _construct_table_input("t" * 255, metadata_file, metadata.properties, metadata, None, metadata_file)
    request = {"DatabaseName": "d" * 255, "TableInput": table_input, "VersionId": "1" * 20, "SkipArchive": True}
    operation = botocore.session.get_session().get_service_model("glue").operation_model("UpdateTable")
    return len(create_serializer("json").serialize_to_request(request, operation)["body"])


def test_one_update_table_carries_the_most_columns_with_the_longest_names() -> None:
    # Given names as costly in a request as the rule allows (quotes escape to two bytes each, which
    # the name mapping escapes again), MAX_TABLE_COLUMNS of them
    worst = [f"{i:05d}" + '"' * ((C.MAX_NAME_REQUEST_BYTES - 5) // 2) for i in range(C.MAX_TABLE_COLUMNS)]
    assert all(C.valid_column_name(n) and C.request_bytes(n) >= C.MAX_NAME_REQUEST_BYTES - 1 for n in worst)
    non_ascii = [f"{i:05d}" + "\u00e9" * ((C.MAX_NAME_REQUEST_BYTES - 5) // 6) for i in range(C.MAX_TABLE_COLUMNS)]
    assert all(C.valid_column_name(n) for n in non_ascii)
    # Then the request stays within the budget, and one more such column would not fit a 1% margin
    assert update_table_bytes(worst) <= C.UPDATE_TABLE_BUDGET
    assert update_table_bytes(non_ascii) <= C.UPDATE_TABLE_BUDGET
    more = [f"x{i:04d}" + '"' * ((C.MAX_NAME_REQUEST_BYTES - 5) // 2) for i in range(3)]
    assert update_table_bytes(worst + more) > 0.98 * C.UPDATE_TABLE_BUDGET


def test_the_bound_is_the_job_s_and_the_stack_s() -> None:
    from glue_processor.defaults import DEFAULT_MAX_COLUMNS
    from glue_processor.settings import JobSettings
    from glue_processor.shared.names import RESERVED_COLUMNS

    assert len(RESERVED_COLUMNS) + 1 == C.RESERVED  # the lineage columns, _extra, _rescued, and one spare
    assert DEFAULT_MAX_COLUMNS == C.MAX_DATA_COLUMNS
    assert JobSettings.model_fields["max_columns"].metadata[-1].le == C.MAX_DATA_COLUMNS


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet=st.characters(max_codepoint=0x7F) | st.sampled_from("é\u03a3\U0001f600"), max_size=140))
def test_fit_measures_each_character_as_json_dumps_does(name: str) -> None:
    # fit() takes an ASCII character's request bytes from a table: the same cut as json.dumps of each
    for suffix in ("", "__2", "__10"):
        units, octets, sent, out = (
            C.MAX_LENGTH - len(suffix),
            C.MAX_UTF8_BYTES - len(suffix),
            C.MAX_NAME_REQUEST_BYTES - len(suffix),
            [],
        )
        for c in name:
            width, size, cost = (2 if ord(c) > 0xFFFF else 1), len(c.encode("utf-8")), len(json.dumps(c)) - 2
            if width > units or size > octets or cost > sent:
                break
            out.append(c)
            units, octets, sent = units - width, octets - size, sent - cost
        assert C.fit(name, suffix) == "".join(out) + suffix
