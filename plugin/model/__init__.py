"""The core's data model: rows and rules (how a caller is recovered), and the
evidence records every walk produces. Plain data; nothing here reads memory
or formats for a debugger.

The closed vocabularies live here too, each a str-valued enum whose members
carry their description (vocabulary.py): rule and CFA kinds (rules.py),
attempt statuses and failure kinds (outcome.py), stop reasons (stops.py).
JSON keeps their string values."""
