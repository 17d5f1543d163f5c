"""What a column may be called where the table lives: the rule, written once.

The table's columns reach two services, and each refuses names its API model does not allow:

- **AWS Glue Data Catalog**, ``Column.Name`` (``NameString`` in botocore's
  ``data/glue/2017-03-31/service-2.json``; https://docs.aws.amazon.com/glue/latest/webapi/API_Column.html):
  1 to 255 characters matching ``[\\u0020-\\uD7FF\\uE000-\\uFFFD\\uD800\\uDC00-\\uDBFF\\uDFFF\\t]*``.
  An UpdateTable carrying any other name fails, and with it the Iceberg commit.
- **Amazon Athena**, ``Column.Name`` (``NameString`` in botocore's ``data/athena/2017-05-18/service-2.json``;
  https://docs.aws.amazon.com/athena/latest/APIReference/API_Column.html): 1 to 128 characters.

So a name is 1 to 128 UTF-16 code units (the services measure Java strings; a character past
U+FFFF is two of them), with no control character but tab and neither U+FFFE nor U+FFFF. Athena
and Spark resolve names case-insensitively; :func:`glue_processor.ndjson.column_names` keeps names
distinct under that. ``tests/contracts/test_column_names.py`` checks these constants against the
service models botocore ships.
"""

from __future__ import annotations

import re

# the shorter of the two services' maxima (Athena's)
MAX_LENGTH = 128
MIN_LENGTH = 1
# Glue's pattern, with its surrogate pair written as the code points it stands for (Python's str
# holds code points, not UTF-16 units)
PATTERN = re.compile("[\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff\t]*")


def utf16_length(name: str) -> int:
    """The name's length as the services count it: UTF-16 code units."""
    return len(name) + sum(1 for c in name if ord(c) > 0xFFFF)


def valid_column_name(name: str) -> bool:
    """True when both services accept ``name`` as a column name as it is."""
    return MIN_LENGTH <= utf16_length(name) <= MAX_LENGTH and PATTERN.fullmatch(name) is not None


def fit(name: str, suffix: str = "") -> str:
    """``name`` cut so that with ``suffix`` it is at most :data:`MAX_LENGTH` long (never inside a
    character)."""
    room = MAX_LENGTH - utf16_length(suffix)
    out = []
    used = 0
    for c in name:
        width = 2 if ord(c) > 0xFFFF else 1
        if used + width > room:
            break
        out.append(c)
        used += width
    return "".join(out) + suffix
