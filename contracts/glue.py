"""Facts about the Glue job that the control plane and the stack must agree on."""

from __future__ import annotations

from typing import Literal, get_args

# Worker types for a Glue 5 streaming job (AWS Glue Developer Guide, "AWS Glue worker types" and the
# Job API's WorkerType): G.025X is for streaming jobs only; G.4X and G.8X are documented for Spark ETL
# jobs (glueetl), not for streaming ones, and Standard is Glue 1.0's.
StreamingWorkerType = Literal["G.025X", "G.1X", "G.2X"]
STREAMING_WORKER_TYPES: tuple[str, ...] = get_args(StreamingWorkerType)
