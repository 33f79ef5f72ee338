"""``perfbisect bisect explain``: launch the last good and the first bad configuration again
with diagnostics on, and say what differs, ranked by its share of the metric's delta."""
