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


class MetricsReader(Protocol):
    def series(self, name: str, *, minutes: int, stat: str = "Maximum") -> list[float]:
        """Datapoints of one job metric over the last ``minutes``, oldest first."""
        ...


class CloudWatchReader:
    def __init__(self, client: CloudWatchClient, namespace: str, dimensions: dict[str, str]) -> None:
        self.client = client
        self.namespace = namespace
        self.dimensions = dimensions

    def series(self, name: str, *, minutes: int, stat: str = "Maximum") -> list[float]:
        end = datetime.now(UTC)
        try:
            out = self.client.get_metric_data(
                MetricDataQueries=[
                    {
                        "Id": "m",
                        "MetricStat": {
                            "Metric": {
                                "Namespace": self.namespace,
                                "MetricName": name,
                                "Dimensions": [{"Name": k, "Value": v} for k, v in sorted(self.dimensions.items())],
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
        points = sorted(zip(result["Timestamps"], result["Values"], strict=True))
        return [float(v) for _, v in points]


class JsonlReader:
    """The same view over a local run's ``metrics.jsonl`` (one value per datum)."""

    def __init__(self, path: Path, dimensions: dict[str, str]) -> None:
        self.path = path
        self.dimensions = dimensions

    def series(self, name: str, *, minutes: int, stat: str = "Maximum") -> list[float]:
        if not self.path.exists():
            return []
        points = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            d = json.loads(line)
            if d["name"] == name and all(d["dimensions"].get(k) == v for k, v in self.dimensions.items()):
                points.append((d["timestamp"], float(d["value"])))
        if not points:
            return []
        newest = datetime.fromisoformat(max(p[0] for p in points))
        since = newest - timedelta(minutes=minutes)
        return [v for t, v in sorted(points) if datetime.fromisoformat(t) >= since]
