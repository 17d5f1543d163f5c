"""The manifest builder's metrics for one invocation (published through powertools EMF)."""

from __future__ import annotations

from contracts import metrics as M
from contracts.metrics import Datum, datum
from lambdas.manifest_builder.service import BuildResult

SERVICE = "manifest-builder"


def result_datums(result: BuildResult, *, service: str = SERVICE) -> list[Datum]:
    dims = {"service": service}
    out = [
        datum(M.MANIFESTS_WRITTEN, len(result.manifests_written), dims),
        datum(M.DUPLICATES_DROPPED, result.duplicates_dropped, dims),
        datum(M.RECORDS_REJECTED, result.rejected_records, dims),
        datum(M.OBJECTS_IGNORED, result.ignored_objects, dims),
    ]
    out += [datum(M.OBJECTS_PER_MANIFEST, n, dims) for n in result.files_per_manifest]
    out += [datum(M.BYTES_PER_MANIFEST, n, dims) for n in result.bytes_per_manifest]
    return out
