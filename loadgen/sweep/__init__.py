"""`loadgen sweep`: plan, cells, servers, results."""
