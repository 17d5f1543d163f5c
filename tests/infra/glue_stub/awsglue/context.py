"""``GlueContext``: a SparkContext and its SparkSession."""

from __future__ import annotations

from pyspark.sql import SparkSession


class GlueContext:
    def __init__(self, spark_context: object) -> None:
        self.spark_session = SparkSession.builder.getOrCreate()
