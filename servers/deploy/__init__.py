"""What a deployment is, the types the catalog (servers/deployments) and the engines
(servers/engines) share: the dataclasses a deployment file becomes and a rendered server
(`model.py`), the checks of a file's keys (`schema.py`) and the CPUs a CPU server is pinned to
(`machine.py`). A leaf: it imports nothing of servers/ but itself, so the catalog, which reads
the engines, and the engines, which read these types, import one way (tests/test_imports.py)."""
