"""Framework releases: the version environments listed in requirements/versions.txt (versions)
and the sweep that runs the same cells under each, releases interleaved cell by cell (sweep).

May import: the foundation, the registry, the cells layer and capacity; never publish or the
commands.
"""
