"""Analysis and publication: results -> tidy DataFrame -> tables, plots, claims, report."""
