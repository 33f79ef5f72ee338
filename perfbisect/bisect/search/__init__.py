"""The search as one model: the posterior (model.py), the launch rule (planner.py), the stop
rule (stop.py) and the engine the driver runs (searcher.py)."""
