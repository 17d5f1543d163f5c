"""Plan a batch: which objects, read how, in how many tasks (pure)."""
