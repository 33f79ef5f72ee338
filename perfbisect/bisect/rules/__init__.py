"""Today's default search: the rule engine, a chain of layers on ``EngineState``
(``SlowLaunches`` -> ``Levels`` -> ``Verification`` -> ``Audit`` -> ``Endpoints`` -> ``Engine``).
It goes once the model engine (``bisect/search/``) meets its benchmark targets."""
