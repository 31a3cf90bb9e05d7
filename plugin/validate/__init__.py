"""Checks of one answer against another: the plugin's frames against the
debugger's own, and one table's rows against another's by meaning."""
