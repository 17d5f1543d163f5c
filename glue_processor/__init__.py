"""The 24/7 streaming job: manifests in, Parquet out (PySpark Structured Streaming on AWS Glue)."""
