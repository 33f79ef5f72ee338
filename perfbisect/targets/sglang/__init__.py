"""The SGLang target (in progress): the verify timer installed into a build's environment."""
