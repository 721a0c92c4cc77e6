"""The version of mpsx: the one place it is written. The build reads it from
here (pyproject.toml, scikit-build-core's regex provider), and so do the
docs."""

__version__ = "0.1.0"
