"""The manifest builder: S3 ObjectCreated notifications (via SQS) -> manifests on S3."""
