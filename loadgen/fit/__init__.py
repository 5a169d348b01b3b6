"""`loadgen fit`: a cost profile of the user's own machine, engine and model from their own real
sweeps (loadgen.fit.job), with a readable record of the fit (loadgen.fit.record)."""
