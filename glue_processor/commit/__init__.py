"""Commit: the batch's record (the fence), then its publication, exactly once."""
