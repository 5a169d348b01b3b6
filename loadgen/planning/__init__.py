"""A sweep's plan: what it runs (`plan.py`: the plan and its cells, plain data kept in the
manifest so --resume continues the same sweep), the plan from the sweep's options (`build.py`:
every option checked in one line), and the time-scale probe that picks each level's time
dilation on the emulator (`probe.py`)."""
