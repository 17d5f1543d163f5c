"""Reading the job's recent metrics: CloudWatch on AWS, ``metrics.jsonl`` locally."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from botocore.exceptions import BotoCoreError, ClientError

from lambdas.control_plane.exceptions import ControlPlaneError

if TYPE_CHECKING:
    from mypy_boto3_cloudwatch import CloudWatchClient


# A minute's datapoints are all readable this long after the minute ended (CloudWatch shows a custom
# metric within about a minute of PutMetricData; EMF logs take as long).
SETTLE_S = 60


class MetricsReader(Protocol):
    def series(
        self,
        name: str,
        *,
        minutes: int,
        stat: str = "Maximum",
        dimensions: dict[str, str] | None = None,
        settled: bool = False,
    ) -> list[float]:
        """Datapoints of one metric (the job's, unless ``dimensions`` say whose) over the last
        ``minutes``, one per minute, oldest first. ``settled``: whole minutes only, ended at least
        SETTLE_S ago (a Sum or an Average over a partial minute reads low)."""
        ...

    def age_s(self, name: str, *, minutes: int) -> float | None:
        """Seconds since the newest datapoint of one job metric (None: none within ``minutes``)."""
        ...


class CloudWatchReader:
    def __init__(self, client: CloudWatchClient, namespace: str, dimensions: dict[str, str]) -> None:
        self.client = client
        self.namespace = namespace
        self.dimensions = dimensions

    def series(
        self,
        name: str,
        *,
        minutes: int,
        stat: str = "Maximum",
        dimensions: dict[str, str] | None = None,
        settled: bool = False,
    ) -> list[float]:
        return [v for _, v in self._points(name, minutes=minutes, stat=stat, dimensions=dimensions, settled=settled)]

    def age_s(self, name: str, *, minutes: int) -> float | None:
        points = self._points(name, minutes=minutes, stat="Maximum", dimensions=None, settled=False)
        if not points:
            return None
        return (datetime.now(UTC) - points[-1][0]).total_seconds()

    def _points(
        self, name: str, *, minutes: int, stat: str, dimensions: dict[str, str] | None, settled: bool
    ) -> list[tuple[datetime, float]]:
        # whole minutes, as CloudWatch aligns 60 s periods: a window cut mid-minute would split one
        # minute's datapoints over two buckets (the arrival rate is a per-minute Sum); settled: up to
        # the last minute that ended SETTLE_S ago, else up to the end of the current (partial) minute
        now = datetime.now(UTC)
        if settled:
            end = (now - timedelta(seconds=SETTLE_S)).replace(second=0, microsecond=0)
        else:
            end = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
        dims = self.dimensions if dimensions is None else dimensions
        try:
            out = self.client.get_metric_data(
                MetricDataQueries=[
                    {
                        "Id": "m",
                        "MetricStat": {
                            "Metric": {
                                "Namespace": self.namespace,
                                "MetricName": name,
                                "Dimensions": [{"Name": k, "Value": v} for k, v in sorted(dims.items())],
                            },
                            "Period": 60,
                            "Stat": stat,
                        },
                    }
                ],
                StartTime=end - timedelta(minutes=minutes),
                EndTime=end,
                ScanBy="TimestampAscending",
            )
        except (ClientError, BotoCoreError) as exc:
            raise ControlPlaneError(f"get_metric_data {name} failed: {exc}") from exc
        result = out["MetricDataResults"][0]
        return [(t, float(v)) for t, v in sorted(zip(result["Timestamps"], result["Values"], strict=True))]


class JsonlReader:
    """The same view over a local run's ``metrics.jsonl`` (one value per datum)."""

    def __init__(self, path: Path, dimensions: dict[str, str]) -> None:
        self.path = path
        self.dimensions = dimensions

    def series(self, name: str, *, minutes: int, dimensions: dict[str, str] | None = None, **_: object) -> list[float]:
        """One value per datum (no statistic to take); a local run is replayed after the fact, so
        every minute is settled."""
        return [v for _, v in self._points(name, minutes=minutes, dimensions=dimensions)]

    def age_s(self, name: str, *, minutes: int) -> float | None:
        """A local run is replayed after the fact: its newest datapoint counts as fresh."""
        return 0.0 if self._points(name, minutes=minutes, dimensions=None) else None

    def _points(self, name: str, *, minutes: int, dimensions: dict[str, str] | None) -> list[tuple[str, float]]:
        if not self.path.exists():
            return []
        dims = self.dimensions if dimensions is None else dimensions
        points = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            d = json.loads(line)
            if d["name"] == name and d["dimensions"] == dims:  # exactly, as CloudWatch tells metrics apart
                points.append((d["timestamp"], float(d["value"])))
        if not points:
            return []
        newest = datetime.fromisoformat(max(p[0] for p in points))
        since = newest - timedelta(minutes=minutes)
        return [(t, v) for t, v in sorted(points) if datetime.fromisoformat(t) >= since]
