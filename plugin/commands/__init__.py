"""The `unwind` commands, declared once and computed once for the GDB, LLDB and offline front-ends.

spec.py      what a command declaration holds (options, positional words and
             their checks, help, JSON shape) and how help is spelled per debugger
catalog.py   the declarations: backtrace, explain, tables, compare, modules, settings
options.py   a command line read against its declaration, GDB style or LLDB style
reports.py   what each command computes: (json object, text)

The front-ends gather registers and settings, parse with options.py, call
reports.py, and print one of the two; settings are declared in plugin/settings.py.
"""
