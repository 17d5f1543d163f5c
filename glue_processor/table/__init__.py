"""The sink: where a batch's Parquet files become visible, and how readers find them.

``iceberg`` (the default) commits each batch as one Iceberg append (:mod:`.iceberg`); ``hive-parquet``
moves staged files to ``dt=`` directories (:mod:`.hive`). Both sit behind :class:`.sink.Sink`, so the
batch path (parse, write, commit record) is the same for both.
"""
