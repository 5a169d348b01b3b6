"""`loadgen capacity`: per variant, the highest load that meets the SLOs (`job.py`: the servers,
the probes, each a sweep cell's measured run; `search.py`: doubling, bisection and repeats at the
boundary, and the recommendation; `mlperf.py`: a probe judged as MLPerf's server scenario)."""
