"""A session's life: the driver that feeds a searcher's launches to targets and records them,
the phases around the search (baseline, full-model confirmation, the merge descent), the specs
that turn ``--good``/``--bad`` into a path, and where a stored session stands."""
