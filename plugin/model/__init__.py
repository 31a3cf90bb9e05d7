"""The core's data model: rows and rules (how a caller is recovered), and the
evidence records every walk produces. Plain data; nothing here reads memory
or formats for a debugger."""
