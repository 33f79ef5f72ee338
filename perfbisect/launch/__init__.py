"""How a server process is started on a host and how the experiment's ``[env]`` reaches it.

The method matters for performance work: the same variables can reach an interactive tmux
shell and miss a plain ``ssh host cmd`` (a non-interactive guard in ``~/.bashrc``), or reach
Python through ``sitecustomize`` but not the shell. Each launcher is one complete recipe.
"""
