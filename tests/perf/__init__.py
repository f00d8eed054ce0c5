"""Measurements of gateway internals in-process, or with parts of the gateway replaced.

They import the gateway's modules, which the benchmark harness (``loadtests/``) does not: it
starts the gateway, and these, as processes."""
