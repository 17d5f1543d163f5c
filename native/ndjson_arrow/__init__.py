"""NDJSON text -> Arrow-layout string columns, one per top-level key, in one native pass.

``scan(data, known, room, *, first_line=1, max_cells=0)`` reads whole lines of ``data`` (split on
LF; a CR before it is white space) from its start and returns ``(new_keys, columns, lines, rows,
bad, extra, consumed, next_line, probes)``:

- ``new_keys``: keys not in ``known`` that became columns, in the order first seen; at most ``room``
  of them. Keys past the room are *spilled*: their values go to ``extra`` instead of a column each.
- ``columns``: one per key of ``known`` then ``new_keys``: ``None`` when every value is NULL, else
  ``(offsets, data, validity, null_count)``: int32 offsets (``rows + 1``), the UTF-8 values back to
  back, and an LSB-first validity bitmap (``None`` when no value is NULL). Strings are unescaped;
  numbers and ``true``/``false`` are their literal as written; objects and arrays are their text
  with white space outside strings removed (escapes kept as written); ``null`` is NULL. A key
  repeated in a line keeps its last value.
- ``lines``: int64 line numbers of the ``rows`` rows, ``data``'s first line being ``first_line``.
- ``bad``: ``(line, reason, start, end)`` of every line that is not blank (JSON white space only)
  and not exactly one JSON object in valid UTF-8; ``data[start:end]`` is the line. Nothing of a
  bad line is kept: not its values, not the keys it introduced.
- ``extra``: ``None``, or the spilled values as a ``map<string, string>``'s parts: ``(row_offsets,
  row_validity, null_rows, key_offsets, key_data, value_offsets, value_data, entries)`` with int32
  offsets; a row without spilled values is NULL, a spilled ``null`` is not kept.

- ``consumed``, ``next_line``: how many bytes (whole lines) were scanned, and the number of the
  first line not scanned: the rest of ``data`` is for the next call. A scan stops before a line
  that would take ``rows x columns`` (known keys and new columns) past ``max_cells`` (0: no bound),
  or its new keys past :data:`MAX_SCAN_KEYS`; it always scans at least one line.
- ``probes``: the hash-table slots its key lookups visited (its cost, for tests of the bound).

Lines nested deeper than :data:`MAX_DEPTH` levels are bad (``TOO_DEEP``), and so are objects with
more than :data:`MAX_LINE_KEYS` distinct keys (``TOO_MANY_KEYS``), and lines with an escaped lone
UTF-16 surrogate, which names no character (``SURROGATE``). Keys are hashed with SipHash-1-3
under a key drawn at random per process: an input cannot choose keys that collide. The GIL is
released while scanning, over a private copy of ``data`` when its buffer is writable.

``Framer(max_record, first_line)`` turns a JSON document that is not NDJSON (one array of objects,
or objects across lines one after another) into NDJSON as it streams: ``feed(block)`` and, at the
end, ``finish()`` return ``(records, starts, longs)``: the complete records so far, a line each,
their int64 start lines, and ``(line, size, head)`` of records over ``max_record`` bytes (not
copied). ``line`` is the line the next byte is on. ``sniff_document(head)`` says whether a text
that starts with ``head`` is such a document (1), NDJSON (0), or cannot tell yet (-1). See
``frame_core.h`` for the rules.

``newlines(data, start, end)`` counts the LF bytes of ``data[start:end]`` without copying it (for
line numbers: several times faster than ``bytes.count``).
"""

from ndjson_arrow._scan import MAX_DEPTH, MAX_LINE_KEYS, MAX_SCAN_KEYS, Framer, newlines, scan
from ndjson_arrow._scan import sniff as sniff_document

NOT_UTF8, TRAILING, ARRAY, SCALAR, MALFORMED, TOO_DEEP, TOO_MANY_KEYS, SURROGATE = range(1, 9)

__all__ = [
    "ARRAY",
    "MALFORMED",
    "MAX_DEPTH",
    "MAX_LINE_KEYS",
    "MAX_SCAN_KEYS",
    "NOT_UTF8",
    "SCALAR",
    "SURROGATE",
    "TOO_DEEP",
    "TOO_MANY_KEYS",
    "TRAILING",
    "Framer",
    "newlines",
    "scan",
    "sniff_document",
]
