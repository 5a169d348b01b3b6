"""`loadgen report DIR`: a sweep's results turned into the answer (docs/report.md). Data flows
one way: results directory (data.py) -> tables (tables.py) -> figures (plots.py) -> report.md,
report.html (render.py), with every table also written as CSV and parquet; builder.py puts them
together. Nothing is imported here, so that a piece (speedup.py, numbers.py) comes without the
report's plotting libraries."""
