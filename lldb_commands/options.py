"""LLDB's side of option parsing: the declarations (plugin/commands/spec.py) read in LLDB style.

`--json/-j`, `--sources/-s LIST`, `--count/-c N`, `--all/-a`, `--opt=value`,
`-c5`, `--` before words that look like options: plugin.commands.options.parse_lldb
does the reading for every command. UsageError is the one-line error the
LLDB commands (and resolve.py) raise for bad words; the command shows it
after its name.
"""

from plugin.commands.options import Given, parse_lldb
from plugin.commands.spec import ArgumentError as UsageError

__all__ = ["Given", "UsageError", "parse_lldb"]
