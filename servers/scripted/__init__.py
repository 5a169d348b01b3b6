"""A streaming server that follows a known script: the ground truth for measuring the client."""

from servers.scripted.script import FAULTS, Script, ScriptConfig, prompt_token_count, script_for

__all__ = ["FAULTS", "Script", "ScriptConfig", "prompt_token_count", "script_for"]
