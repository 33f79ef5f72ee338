"""perfbisect: automated, noise-aware performance-regression bisection for LLM serving."""

__version__ = "0.1.0"
