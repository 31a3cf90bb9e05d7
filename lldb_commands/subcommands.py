"""The `unwind` subcommands LLDB registers, in the order `help unwind` lists them.

(name, class in lldb_commands.commands); tests/unit/test_command_spec.py holds
it to the catalog's LLDB commands. Imports nothing, so the loader can read it
before the core is importable.
"""

SUBCOMMANDS = (("backtrace", "BacktraceCommand"), ("explain", "ExplainCommand"),
               ("tables", "TablesCommand"), ("compare", "CompareCommand"),
               ("modules", "ModulesCommand"), ("cache", "CacheCommand"), ("settings", "SettingsCommand"),
               ("validate", "ValidateCommand"),
               ("provider", "ProviderCommand"))
