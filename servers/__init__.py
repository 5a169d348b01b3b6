"""Server side: servers loadgen measures, and how to start them.

`servers.scripted` is an OpenAI-compatible streaming server whose every chunk time and token
count follows a known script (the ground truth tests and benchmarks compare against).
`servers.embedded` starts such a server as a child process and tears it down.
Nothing here imports `loadgen`.
"""
