"""Many shapes of NDJSON for ``make bench``: the same job measured on data written differently.

Producers differ: compact or ``json.dumps`` defaults, escaped non-ASCII, strings full of quotes,
tiny or very wide records, keys that vary per record, deep nesting with white space. Each shape is
a generator of one line; :func:`generate` writes a reproducible data set of it.
"""

from __future__ import annotations

import json
import random
import string
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.data import record

MB = 1024 * 1024
_WORDS = ("Zürich", "São Paulo", "Kraków", "東京", "Москва", "القاهرة", "Ελλάδα", "naïve café", "😀 ok", "plain")
_POOL = [f"attr_{i:03d}" for i in range(500)]


def compact(rng: random.Random, seq: int) -> str:
    return json.dumps(record(rng, seq), separators=(",", ":"))


def dumps_defaults(rng: random.Random, seq: int) -> str:
    # Python's defaults: ", " and ": " separators, non-ASCII escaped
    rec = record(rng, seq)
    rec["city"] = rng.choice(_WORDS)
    return json.dumps(rec)


def ascii_escaped(rng: random.Random, seq: int) -> str:
    rec = {
        "id": seq,
        "name": " ".join(rng.choice(_WORDS) for _ in range(6)),
        "city": rng.choice(_WORDS),
        "bio": " ".join(rng.choice(_WORDS) for _ in range(30)),
        "tags": [rng.choice(_WORDS) for _ in range(5)],
    }
    return json.dumps(rec, ensure_ascii=True, separators=(",", ":"))


def quotes_backslashes(rng: random.Random, seq: int) -> str:
    def noisy(n: int) -> str:
        return "".join(rng.choice('ab"\\/\t\n' + string.ascii_letters) for _ in range(n))

    rec = {"id": seq, "path": "C:\\Users\\" + noisy(20), "quote": noisy(200), "sql": f'SELECT "{noisy(40)}"'}
    rec["json"] = json.dumps({"inner": noisy(60)})
    return json.dumps(rec, separators=(",", ":"))


def small(rng: random.Random, seq: int) -> str:
    rec = {"id": seq, "k": rng.choice(("a", "b", "c")), "v": rng.randint(0, 10**6), "ok": rng.random() < 0.5}
    rec["ts"] = f"2026-11-22T{seq % 24:02d}:00:00Z"
    return json.dumps(rec, separators=(",", ":"))


def wide(rng: random.Random, seq: int) -> str:
    rec: dict[str, Any] = {"id": seq}
    for i in range(160):
        kind = i % 4
        rec[f"c{i:03d}"] = (
            rng.randint(0, 10**9)
            if kind == 0
            else f"v{rng.randint(0, 10**6)}"
            if kind == 1
            else rng.random()
            if kind == 2
            else None
        )
    return json.dumps(rec, separators=(",", ":"))


def sparse(rng: random.Random, seq: int) -> str:
    rec: dict[str, Any] = {"id": seq}
    for key in rng.sample(_POOL, rng.randint(8, 20)):
        rec[key] = rng.choice((rng.randint(0, 999), f"s{rng.randint(0, 99)}", [1, 2], {"x": 1}))
    return json.dumps(rec, separators=(",", ":"))


def deep_spaced(rng: random.Random, seq: int) -> str:
    node: Any = {"leaf": rng.randint(0, 10**6), "s": rng.choice(_WORDS)}
    for depth in range(rng.randint(8, 12)):
        node = {"level": depth, "child": node, "list": [depth, {"k": str(depth)}]}
    return json.dumps({"id": seq, "tree": node, "meta": {"a": [1, 2, 3], "b": {"c": None}}})


def tiny(rng: random.Random, seq: int) -> str:
    # ~60 B: a counter or a sensor reading
    return json.dumps({"id": seq, "k": rng.choice("abc"), "v": rng.randint(0, 10**6)}, separators=(",", ":"))


def crlf(rng: random.Random, seq: int) -> str:
    # a Windows producer: every line ends CR LF (write_ndjson adds the LF)
    return compact(rng, seq) + "\r"


def audit(rng: random.Random, seq: int) -> str:
    # an audit log record (CloudTrail-like): nested identity, request and response objects, ~1.2 KB
    rec = {
        "eventVersion": "1.09",
        "eventTime": f"2026-11-22T{seq % 24:02d}:{seq % 60:02d}:{(seq * 7) % 60:02d}Z",
        "eventSource": rng.choice(("s3.amazonaws.com", "iam.amazonaws.com", "sts.amazonaws.com")),
        "eventName": rng.choice(("GetObject", "PutObject", "AssumeRole", "ListBuckets")),
        "awsRegion": rng.choice(("eu-west-1", "us-east-1")),
        "sourceIPAddress": f"10.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(0, 255)}",
        "userAgent": "aws-sdk-java/2.25.1 Linux/5.10 OpenJDK_64-Bit_Server_VM/17.0.10",
        "userIdentity": {
            "type": "AssumedRole",
            "principalId": f"AROA{rng.randbytes(8).hex().upper()}:session-{seq}",
            "arn": f"arn:aws:sts::123456789012:assumed-role/app-{rng.randint(1, 40)}/session-{seq}",
            "sessionContext": {"attributes": {"creationDate": "2026-11-22T00:00:00Z", "mfaAuthenticated": "false"}},
        },
        "requestParameters": {"bucketName": f"bucket-{rng.randint(1, 20)}", "key": f"p/{rng.randbytes(12).hex()}"},
        "responseElements": None,
        "requestID": rng.randbytes(8).hex().upper(),
        "eventID": str(rng.randbytes(16).hex()),
        "readOnly": rng.random() < 0.7,
        "resources": [{"type": "AWS::S3::Object", "ARN": f"arn:aws:s3:::bucket/{rng.randbytes(6).hex()}"}],
        "eventType": "AwsApiCall",
        "recipientAccountId": "123456789012",
        "tlsDetails": {"tlsVersion": "TLSv1.3", "cipherSuite": "TLS_AES_128_GCM_SHA256"},
    }
    return json.dumps(rec, separators=(",", ":"))


_CJK = "東京大阪京都日本語中文字符한국어😀🚀🎉✨"


def blobs(rng: random.Random, seq: int) -> str:
    # emoji and CJK text, and now and then a 1 MB blob in one value
    size = 1_000_000 if seq % 400 == 0 else rng.randint(50, 400)
    text = "".join(rng.choice(_CJK) for _ in range(size // 3))
    return json.dumps({"id": seq, "lang": rng.choice(("ja", "zh", "ko")), "text": text}, ensure_ascii=False)


_MIXED = (compact, small, audit, dumps_defaults, deep_spaced)


def mixed(rng: random.Random, seq: int) -> str:
    # several producers into one prefix: each line one of their shapes
    return rng.choice(_MIXED)(rng, seq)


SHAPES: dict[str, Callable[[random.Random, int], str]] = {
    "compact": compact,
    "dumps-defaults": dumps_defaults,
    "ascii-escaped": ascii_escaped,
    "quotes-backslashes": quotes_backslashes,
    "small-records": small,
    "wide-180-keys": wide,
    "sparse-keys": sparse,
    "deep-spaced": deep_spaced,
    "tiny-records": tiny,
    "crlf": crlf,
    "audit-logs": audit,
    "emoji-cjk-blobs": blobs,
    "mixed": mixed,
}


def generate(root: Path, shape: str, *, total_mb: int, file_mb: int = 8, seed: int = 11) -> list[Path]:
    """About ``total_mb`` MB of one shape in files of ``file_mb`` MB (cached by a stamp)."""
    stamp = root / f".done-{shape}-{total_mb}-{file_mb}-{seed}"
    if stamp.exists():
        return sorted(root.glob("*.json"))
    root.mkdir(parents=True, exist_ok=True)
    for old in [*root.glob("*.json"), *root.glob(".done-*")]:
        old.unlink()
    rng = random.Random(seed)  # noqa: S311 - reproducible data
    paths = write_ndjson(root, SHAPES[shape], rng, total_mb=total_mb, file_mb=file_mb)
    stamp.touch()
    return paths


def write_ndjson(
    root: Path, line_of: Callable[[random.Random, int], str], rng: random.Random, *, total_mb: int, file_mb: int
) -> list[Path]:
    """Files ``part-NNNNN.json`` of ``file_mb`` MB of lines ``line_of(rng, seq)`` under ``root``."""
    paths, seq = [], 0
    for f in range(max(1, total_mb // file_mb)):
        path = root / f"part-{f:05d}.json"
        size = 0
        with path.open("w", encoding="utf-8") as out:
            while size < file_mb * MB:
                line = line_of(rng, seq) + "\n"
                out.write(line)
                size += len(line.encode())
                seq += 1
        paths.append(path)
    return paths
