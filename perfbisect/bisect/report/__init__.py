"""The report: the typed contract (report_model.py), built once from an engine's final state
and the stored launches (report.py), with the evidence behind each launch and the warnings."""
