"""Design-space sweeps: models x hardware configurations x quantization settings on dask.

``spec`` parses SPEC.yaml into points, ``shard`` calibrates in shards with exact merges,
``worker`` is what a dask worker runs, ``runner`` submits the task graph and streams rows into
``results`` (OUTDIR/results.csv), ``html`` writes the Pareto page, ``cli`` is ``npu-studio sweep``.
"""
