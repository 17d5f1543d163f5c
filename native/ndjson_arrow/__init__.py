"""NDJSON text -> Arrow-layout string columns, one per top-level key, in one native pass.

``scan(data, known, room)`` reads ``data`` (lines split on LF; a CR before it is white space) and
returns ``(new_keys, columns, lines, rows, bad, extra)``:

- ``new_keys``: keys not in ``known`` that became columns, in the order first seen; at most ``room``
  of them. Keys past the room are *spilled*: their values go to ``extra`` instead of a column each.
- ``columns``: one per key of ``known`` then ``new_keys``: ``None`` when every value is NULL, else
  ``(offsets, data, validity, null_count)``: int32 offsets (``rows + 1``), the UTF-8 values back to
  back, and an LSB-first validity bitmap (``None`` when no value is NULL). Strings are unescaped;
  numbers and ``true``/``false`` are their literal as written; objects and arrays are their text
  with white space outside strings removed (escapes kept as written); ``null`` is NULL. A key
  repeated in a line keeps its last value.
- ``lines``: int32 line numbers (1-based) of the ``rows`` rows.
- ``bad``: ``(line, reason, start, end)`` of every line that is not blank (JSON white space only)
  and not exactly one JSON object in valid UTF-8; ``data[start:end]`` is the line. Nothing of a
  bad line is kept: not its values, not the keys it introduced.
- ``extra``: ``None``, or the spilled values as a ``map<string, string>``'s parts: ``(row_offsets,
  row_validity, null_rows, key_offsets, key_data, value_offsets, value_data, entries)`` with int32
  offsets; a row without spilled values is NULL, a spilled ``null`` is not kept.

Lines nested deeper than :data:`MAX_DEPTH` levels are bad (``TOO_DEEP``). The GIL is released
while scanning.

``newlines(data, start, end)`` counts the LF bytes of ``data[start:end]`` without copying it (for
line numbers: several times faster than ``bytes.count``).
"""

from ndjson_arrow._scan import MAX_DEPTH, newlines, scan

NOT_UTF8, TRAILING, ARRAY, SCALAR, MALFORMED, TOO_DEEP = range(1, 7)

__all__ = ["ARRAY", "MALFORMED", "MAX_DEPTH", "NOT_UTF8", "SCALAR", "TOO_DEEP", "TRAILING", "newlines", "scan"]
