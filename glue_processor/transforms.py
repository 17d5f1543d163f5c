"""Pure DataFrame transforms of the batch path: DataFrame in, DataFrame out, no I/O.

The shape of the data as it moves through a batch:

    files:  file_uri, value                      one row per NDJSON object (read whole)
    lines:  file_uri, line, text, blank          one row per line, 1-based line number
    parsed: file_uri, line, text, blank, fields, clean
                                                 fields = MAP<STRING,STRING>, NULL if not an object
    output: <data columns...>, <lineage...>      every top-level field as a string
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, MapType, StringType, StructField, StructType

FIELDS_TYPE = "MAP<STRING,STRING>"
# Jackson's defaults (20M-char strings, depth 1000) would reject valid records; Java's own limits apply.
JSON_OPTIONS = {"maxStringLen": str(2**31 - 1), "maxNestingDepth": "10000"}
# Lineage columns added to every output row. Data fields with the same names are renamed.
LINEAGE_COLUMNS = ("_source_uri", "_source_etag", "_line", "_event_time", "_batch_id", "_ingest_time")

# The wrapper around each line: {"v":<line>,"\u0000":1}. The marker is named NUL: a line could only
# fake it by carrying the escape \u0000 as a key right after its object (raw NULs are not JSON).
_END_MARKER = "\u0000"
_END_MARKER_JSON = ',"\\u0000":1}'
_WRAPPED_TYPE = StructType(
    [StructField("v", MapType(StringType(), StringType())), StructField(_END_MARKER, IntegerType())]
)

REASON_NOT_UTF8 = "line is not valid UTF-8"
REASON_TRAILING = "trailing content after the JSON object"
REASON_ARRAY = "line is a JSON array, expected an object"
REASON_SCALAR = "line is a JSON scalar, expected an object"
REASON_MALFORMED = "malformed JSON"


def split_lines(files: DataFrame) -> DataFrame:
    """One row per line of each file, with its 1-based line number.

    Lines end with LF or CRLF. Blank lines (only white space) carry no record: they are kept,
    flagged ``blank``, so a file of blank lines is still seen as read (and not as unreadable).
    """
    keep = [c for c in files.columns if c != "value"]
    # A literal "\n" split is ~4x faster than the regex "\r?\n"; a CR before it is dropped after.
    exploded = files.select(*keep, F.posexplode(F.split(F.col("value"), "\n")).alias("pos", "text"))
    text = F.col("text")
    text = F.when(text.endswith("\r"), F.expr("substring(text, 1, length(text) - 1)")).otherwise(text)
    return exploded.select(
        *keep,
        (F.col("pos") + 1).cast("int").alias("line"),
        text.alias("text"),
        (F.octet_length(text) + 1).alias("bytes"),
        (F.trim(text) == "").alias("blank"),
    )


def parse_fields(lines: DataFrame, known: Sequence[str] = ()) -> DataFrame:
    """Parse each line as one JSON object into a string map (NULL for anything else).

    Values keep Spark's JSON text form: strings as they are, nested objects and arrays as
    compact JSON, numbers and booleans as their literal. Duplicate keys: the last one wins
    (needs ``spark.sql.mapKeyDedupPolicy=LAST_WIN``).

    ``clean`` is true when every key of the object is in ``known`` and none repeats: the
    common case, which needs neither a map rebuild nor a look for new columns.
    """
    text = F.col("text")
    # Jackson stops after one value, so '{"a":1} junk', '{"a":1}{"b":2}' or '{"a":1}]' would parse
    # on their own. Parsed as the value of a field followed by an end marker, anything after
    # the object breaks the parse or hides the marker.
    wrapped = F.from_json(F.concat(F.lit('{"v":'), text, F.lit(_END_MARKER_JSON)), _WRAPPED_TYPE, JSON_OPTIONS)
    # Splitting decodes each line, turning invalid UTF-8 bytes into U+FFFD: such a line would be
    # stored changed, so it is rejected (a genuine U+FFFD in the data is rejected too).
    one_object = ~F.col("blank") & (F.col("_wrapped").getField(_END_MARKER) == 1) & ~text.contains("\ufffd")
    parsed = lines.withColumn("_wrapped", wrapped).withColumn(
        "_map", F.when(one_object, F.col("_wrapped").getField("v"))
    )
    # Distinct known keys present == number of keys <=> no repeated key and no unknown key.
    hits = sum((F.map_contains_key("_map", key).cast("int") for key in known), F.lit(0))
    parsed = parsed.withColumn("clean", F.size("_map") == hits)
    # from_json keeps a repeated key twice (a lookup would find the first); rebuilding the map
    # applies spark.sql.mapKeyDedupPolicy=LAST_WIN, as most JSON parsers do. Only rows that
    # are not clean pay for it.
    fields = F.when(F.col("clean"), F.col("_map")).otherwise(F.map_from_entries(F.map_entries("_map")))
    parsed = parsed.withColumn("fields", fields)
    # The raw text is only needed for quarantine records.
    return parsed.withColumn("text", F.when(F.col("fields").isNull(), text)).drop("_wrapped", "_map")


def new_keys(known: Sequence[str]) -> Column:
    """Per row: the keys of ``fields`` not in ``known`` (NULL for clean rows and non-objects)."""
    known_array = F.array(*[F.lit(k) for k in known]).cast("ARRAY<STRING>")
    return F.when(~F.col("clean"), F.array_except(F.map_keys("fields"), known_array))


def rejection_reason() -> Column:
    """Why a line whose ``fields`` is NULL was rejected (evaluate on rejected rows only)."""
    text = F.col("text")
    return (
        F.when(text.contains("\ufffd"), F.lit(REASON_NOT_UTF8))
        .when(F.from_json(text, FIELDS_TYPE, JSON_OPTIONS).isNotNull(), F.lit(REASON_TRAILING))
        .when(F.from_json(text, "ARRAY<STRING>").isNotNull(), F.lit(REASON_ARRAY))
        .when(
            F.from_json(F.concat(F.lit("["), text, F.lit("]")), "ARRAY<STRING>").isNotNull(),
            F.lit(REASON_SCALAR),
        )
        .otherwise(F.lit(REASON_MALFORMED))
    )


def file_stats(parsed: DataFrame, known: Sequence[str]) -> DataFrame:
    """Per file: good and bad line counts, text bytes, and the keys not in ``known``."""
    good = F.col("fields").isNotNull()
    bad = F.col("fields").isNull() & ~F.col("blank")
    optional = [F.max("file_mtime").alias("file_mtime")] if "file_mtime" in parsed.columns else []
    return parsed.groupBy("file_uri").agg(
        *optional,
        F.count(F.when(good, 1)).alias("good"),
        F.count(F.when(bad, 1)).alias("bad"),
        F.sum("bytes").alias("text_bytes"),
        F.array_distinct(F.flatten(F.collect_set(new_keys(known)))).alias("new_keys"),
    )


def column_names(keys: Iterable[str]) -> list[tuple[str, str]]:
    """Map JSON keys to Parquet column names, deterministically.

    Engines such as Athena and Spark (by default) resolve column names case-insensitively, so
    keys that differ only by case, or that collide with a lineage column, get a suffix
    ``__2``, ``__3``... in sorted order. An empty key becomes ``_empty_key``.
    """
    taken = {name.lower() for name in LINEAGE_COLUMNS}
    mapping: list[tuple[str, str]] = []
    for key in sorted(set(keys)):
        base = key if key else "_empty_key"
        name, n = base, 1
        while name.lower() in taken:
            n += 1
            name = f"{base}__{n}"
        taken.add(name.lower())
        mapping.append((key, name))
    return sorted(mapping, key=lambda kv: (kv[1].lower(), kv[1]))


def project_output(
    parsed: DataFrame, columns: Sequence[tuple[str, str]], *, batch_id: int, ingest_time_iso: str
) -> DataFrame:
    """The output rows: one string column per key, then the lineage columns.

    ``parsed`` must carry ``source_uri``, ``etag`` and ``event_time`` from the file table.
    """
    data = [F.col("fields").getItem(key).alias(name) for key, name in columns]
    lineage = [
        F.col("source_uri").alias("_source_uri"),
        F.col("etag").alias("_source_etag"),
        F.col("line").alias("_line"),
        F.col("event_time").alias("_event_time"),
        F.lit(batch_id).cast("long").alias("_batch_id"),
        F.to_timestamp(F.lit(ingest_time_iso)).alias("_ingest_time"),
    ]
    return parsed.where(F.col("fields").isNotNull()).select(*data, *lineage)


def rejected_lines(parsed: DataFrame, *, batch_id: int) -> DataFrame:
    """Quarantine records for the lines that are not JSON objects."""
    return parsed.where(F.col("fields").isNull() & ~F.col("blank")).select(
        F.lit("line").alias("kind"),
        F.col("source_uri"),
        F.col("line").cast("long"),
        rejection_reason().alias("reason"),
        F.col("text").alias("raw"),
        F.col("manifest_uri"),
        F.lit(batch_id).cast("long").alias("batch_id"),
    )
