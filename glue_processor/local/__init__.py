"""Running the pipeline on one machine: local directories stand in for the S3 buckets."""
