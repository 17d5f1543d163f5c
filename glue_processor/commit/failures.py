"""How often a batch failed, and why: counted across restarts, so a poison batch is recognised."""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

from glue_processor.hadoop_fs import HadoopFS

logger = logging.getLogger(__name__)
# a batch's shares publish in parallel threads, and each may count a refusal in the batch's file:
# its read-modify-write is one at a time in this process (one driver writes it)
_LOCK = threading.Lock()


class Failures:
    """``<output>/_failures/<query>/<batch>.json``: ``count`` (failed attempts of the batch),
    ``refusals`` (publications the table refused), ``error`` (the last one)."""

    def __init__(self, fs: HadoopFS, output_uri: str, query_id: str) -> None:
        self.fs, self.output_uri, self.query_id = fs, output_uri, query_id

    def uri(self, batch_id: int) -> str:
        return f"{self.output_uri}/_failures/{self.query_id}/{batch_id:012d}.json"

    def get(self, batch_id: int) -> dict[str, Any]:
        uri = self.uri(batch_id)
        if not self.fs.exists(uri):
            return {"count": 0, "error": None}
        return dict(json.loads(self.fs.read_bytes(uri)))

    def record(self, batch_id: int, count: int, exc: BaseException, *, key: str = "count") -> None:
        """Write the count under ``key`` with the error; a problem writing it is logged, never raised."""
        try:
            with _LOCK:
                body = {
                    "count": 0,
                    **self.get(batch_id),
                    key: count,
                    "error": f"{type(exc).__name__}: {str(exc)[:2000]}",
                }
                self.fs.write_bytes(self.uri(batch_id), json.dumps(body).encode())
            logger.error("batch failed", extra={"batch_id": batch_id, "attempt": count, "error": body["error"]})
        except Exception:
            logger.exception("could not record the batch failure", extra={"batch_id": batch_id})
