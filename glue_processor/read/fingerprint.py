"""An object version's text print, for a table with ``on_overwrite: tail`` (docs/mirror.md): one
Spark task per object, before the parse tasks.

The task streams the version's bytes once (no parsing, ~1 GB/s of SHA-256 on one core) and returns
its print: the bytes through its last line end, their SHA-256, the line ends among them, and whether
a torn last line follows. Asked to, it also says whether the version's first ``check_bytes`` bytes
hash to ``check_sha256``: the print of the version loaded before. Only then is the version read from
where that one ended: an extension is verified, never assumed from a size. A gzip object, a JSON
document (not NDJSON) and a version that cannot be read get no print (read whole, as replace does).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from contracts.ledger import TextPrint
from glue_processor.shared.objects import ObjectStore, store_for
from glue_processor.shared.spec import FileTask
from glue_processor.shared.text import BOM, SNIFF_BYTES, is_document
from glue_processor.shared.version import NotReadable, event_version

BLOCK = 1024 * 1024


@dataclass(frozen=True)
class PrintTask:
    item: int  # the object's place in the batch
    read_uri: str
    etag: str
    event_time: datetime
    version_id: str | None = None
    check_bytes: int = 0  # 0: nothing to check
    check_sha256: str = ""


@dataclass(frozen=True)
class PrintResult:
    item: int
    text: TextPrint | None  # None: no print (a document, gzip, not readable)
    extends: bool = False  # its first check_bytes bytes are the version loaded before


def text_print(task: PrintTask, stores: Callable[[str], ObjectStore] = store_for) -> PrintResult:
    """The print of ``task``'s object version (a Spark task)."""
    if task.read_uri.lower().endswith(".gz"):
        return PrintResult(task.item, None)
    item = FileTask(task.read_uri, task.read_uri, task.etag, task.event_time, "", version_id=task.version_id)
    whole = hashlib.sha256()  # every byte so far
    through = whole.copy()  # the bytes through the last line end so far
    prefix = hashlib.sha256() if task.check_bytes else None
    size = end = lines = 0
    try:
        with event_version(item, stores) as body:
            head = body.read(SNIFF_BYTES + len(BOM))
            if is_document(head):
                return PrintResult(task.item, None)
            block = head
            while block:
                if prefix is not None and size < task.check_bytes:
                    prefix.update(block[: task.check_bytes - size])
                cut = block.rfind(b"\n")
                if cut >= 0:  # the state through this block's last line end, then the rest of it
                    whole.update(block[: cut + 1])
                    through = whole.copy()
                    whole.update(block[cut + 1 :])
                    lines += block.count(b"\n")
                    end = size + cut + 1
                else:
                    whole.update(block)
                size += len(block)
                block = body.read(BLOCK)
    except (NotReadable, OSError, EOFError):
        return PrintResult(task.item, None)
    extends = prefix is not None and size >= task.check_bytes and prefix.hexdigest() == task.check_sha256
    return PrintResult(task.item, TextPrint(end=end, sha256=through.hexdigest(), lines=lines, torn=size > end), extends)
