"""The gate's shell parser: a command line taken apart into what it runs (normalise.analyse is the front; docs/ARCHITECTURE.md, The gate)."""
