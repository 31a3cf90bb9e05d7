"""The action loop that gdb_driver.py and lldb_driver.py share (both run inside a debugger's Python).

An action is [name, kind, payload]; `kinds` maps each kind the driver knows
to a function of the payload. Every action's result, or the error it raised,
is stored under its name, so one failing action does not hide the others.
"""

import json
import traceback


def run_actions(actions, kinds, results):
    for name, kind, payload in actions:
        try:
            if kind in kinds:
                results[name] = kinds[kind](payload)
            else:
                results[name] = {"error": "unknown action kind %s" % kind}
        except Exception as exc:
            results[name] = {"error": "%s: %s" % (type(exc).__name__, exc)}


def session_error(exc):
    """The text stored as results["__error__"] when the session itself failed."""
    return "%s: %s\n%s" % (type(exc).__name__, exc, traceback.format_exc())


def write_results(path, results):
    with open(path, "w") as handle:
        json.dump(results, handle)
