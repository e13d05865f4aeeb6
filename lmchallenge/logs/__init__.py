"""Logs on disk: what a log is (:mod:`.schema`), path forms and atomic writes (:mod:`.files`),
jsonlines (:mod:`.jsonl`), Parquet (:mod:`.parquet`), reading and writing any form (:mod:`.io`),
converting between forms (:mod:`.convert`).
"""
