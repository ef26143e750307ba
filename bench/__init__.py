"""Benchmark harness for a2e-host: the five standard workloads, two reference schedulers
(the yardsticks) and the driver. Run ``python -m bench --help``; see bench/README.md."""
