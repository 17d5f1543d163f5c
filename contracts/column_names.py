"""What a column may be called where the table lives: the rule, written once.

The table's columns reach two services, and each refuses names its API model does not allow:

- **AWS Glue Data Catalog**, ``Column.Name`` (``NameString`` in botocore's
  ``data/glue/2017-03-31/service-2.json``; https://docs.aws.amazon.com/glue/latest/webapi/API_Column.html):
  1 to 255 characters matching ``[\\u0020-\\uD7FF\\uE000-\\uFFFD\\uD800\\uDC00-\\uDBFF\\uDFFF\\t]*``;
  the Developer Guide's Table API page (https://docs.aws.amazon.com/glue/latest/dg/aws-glue-api-catalog-tables.html)
  says "UTF-8 string, not less than 1 or more than 255 bytes long". An UpdateTable carrying any
  other name fails, and with it the Iceberg commit.
- **Amazon Athena**, ``Column.Name`` (``NameString`` in botocore's ``data/athena/2017-05-18/service-2.json``;
  https://docs.aws.amazon.com/athena/latest/APIReference/API_Column.html): 1 to 128 characters.

So a name is 1 to 128 UTF-16 code units (Athena; the services measure Java strings, in which a
character past U+FFFF is two) and at most 255 bytes of UTF-8 (Glue, as its guide words it), with no
control character but tab and neither U+FFFE nor U+FFFF.

**One UpdateTable must carry every column.** Each Iceberg commit through the Glue catalog sends the
table's whole column list (pyiceberg's ``GlueCatalog``: a Glue column per field, with its
``iceberg.field.*`` parameters, and the table's properties, among them the name mapping that lists
every name again). Glue refuses a request past a payload limit it does not document
(``InvalidInputException: Payload size of request exceeded limit``, apache/iceberg-go#701, at about
3,600 fields); the only measured Glue request limit on record is 180-190 KB (StartJobRun,
awsdocs/aws-glue-developer-guide#55). The job keeps every UpdateTable under
:data:`UPDATE_TABLE_BUDGET` (160 KiB), by two bounds: a name, as botocore sends it (JSON, non-ASCII
escaped), is at most :data:`MAX_NAME_REQUEST_BYTES`; and a table has at most
:data:`MAX_TABLE_COLUMNS` columns, which is what one request carries with every name that long
(``tests/contracts/test_column_names.py`` measures the request pyiceberg builds, serialized by
botocore). Keys that break either bound keep their values in ``_extra``. Athena
and Spark resolve names case-insensitively; :func:`glue_processor.shared.names.column_names` keeps names
distinct under that. ``tests/contracts/test_column_names.py`` checks these constants against the
service models botocore ships.
"""

from __future__ import annotations

import json
import re

# What one Glue UpdateTable may weigh (see the module docstring), and what bounds it.
UPDATE_TABLE_BUDGET = 160 * 1024
MAX_NAME_REQUEST_BYTES = 128
MAX_TABLE_COLUMNS = 290
# of which data columns (the job's own are the lineage columns, _extra and _rescued): the upper
# bound of --max_columns and of the stack's MaxColumns
RESERVED = 9
MAX_DATA_COLUMNS = MAX_TABLE_COLUMNS - RESERVED
# the shorter of the two services' maxima (Athena's)
MAX_LENGTH = 128
MIN_LENGTH = 1
# Glue's maximum, read as UTF-8 bytes
MAX_UTF8_BYTES = 255
# Glue's pattern, with its surrogate pair written as the code points it stands for (Python's str
# holds code points, not UTF-16 units)
PATTERN = re.compile("[\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff\t]*")


def utf16_length(name: str) -> int:
    """The name's length as the services count it: UTF-16 code units."""
    return len(name) + sum(1 for c in name if ord(c) > 0xFFFF)


def request_bytes(name: str) -> int:
    """The name's bytes in a request, as botocore sends it (JSON, non-ASCII escaped)."""
    return len(json.dumps(name)) - 2


# each ASCII character's bytes in a request, as json.dumps writes it (fit() measures a name a
# character at a time; a json.dumps per character made a 128-character name cost ~100 us)
_ASCII_REQUEST_BYTES = tuple(request_bytes(chr(i)) for i in range(128))


def _char_request_bytes(c: str) -> int:
    code = ord(c)
    return _ASCII_REQUEST_BYTES[code] if code < 128 else request_bytes(c)


def valid_column_name(name: str) -> bool:
    """True when both services accept ``name`` as a column name as it is, and it is short enough
    in a request for :data:`MAX_TABLE_COLUMNS` such names to fit one UpdateTable."""
    return (
        MIN_LENGTH <= utf16_length(name) <= MAX_LENGTH
        and len(name.encode("utf-8", "surrogatepass")) <= MAX_UTF8_BYTES
        and request_bytes(name) <= MAX_NAME_REQUEST_BYTES
        and PATTERN.fullmatch(name) is not None
    )


def fit(name: str, suffix: str = "") -> str:
    """``name`` cut so that with ``suffix`` it is within every length limit (never inside a character)."""
    units = MAX_LENGTH - utf16_length(suffix)
    octets = MAX_UTF8_BYTES - len(suffix.encode("utf-8"))
    sent = MAX_NAME_REQUEST_BYTES - request_bytes(suffix)
    out = []
    for c in name:
        width, size = (2 if ord(c) > 0xFFFF else 1), len(c.encode("utf-8", "surrogatepass"))
        cost = _char_request_bytes(c)
        if width > units or size > octets or cost > sent:
            break
        out.append(c)
        units, octets, sent = units - width, octets - size, sent - cost
    return "".join(out) + suffix
