"""What-if analysis from acceptance traces (issue 12; in progress): the trace form
(`traces`) and how speculation policies step through a request (`policies`). The virtual-time
evaluation over batch sizes and the `loadgen whatif` command are not built yet."""
