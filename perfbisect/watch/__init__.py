"""Continuous mode: measure a branch's new commits as a series, find its change points (Apache
Otava), and bisect from a change point to the commit that caused it."""
