"""Running cells: which cells a selection makes, and which are refused or kept without a
worker (planning), each in a fresh worker process, capped, watched and killed with its group
(worker_launch; its ending classified: worker_outcome), the run resumable (supervision; SIGTERM
as Ctrl-C: termination), on this host or a Ray cluster (engines), with progress and a busy host's
cells measured again (progress), the time it will take (estimate), the plain reference loops
beside the suite's cells (selfcheck) and a GPU session in parts (gpu_session).

May import: the foundation, the registry, backends (declarations only), instruments and the
measure layer's entry points; never capacity, publish or the commands.
"""
