"""``Job``: init and commit, recorded so a test can see they happened."""

from __future__ import annotations


class Job:
    def __init__(self, glue_context: object) -> None:
        self.glue_context = glue_context

    def init(self, name: str, args: dict[str, object]) -> None:
        print(f"awsglue-stub: job.init {name}", flush=True)

    def commit(self) -> None:
        print("awsglue-stub: job.commit", flush=True)
