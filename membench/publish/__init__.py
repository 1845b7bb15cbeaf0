"""Publishing what was measured: asv's benchmark classes over the stored records (asv_suite),
recording them with asv (asv_run, asv_plugin), asv's dashboard offline (dashboard), a GPU
session's results as one archive (archive), the run's summary table (summary) and the
support matrix (support_matrix).

May import: the foundation, the registry, backends (declarations), cells and releases; never
the commands. The results pages themselves are built by `analysis`, which reads records only.
"""
