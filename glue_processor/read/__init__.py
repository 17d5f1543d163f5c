"""Read and parse: a batch's objects into Parquet parts, in Spark tasks."""
