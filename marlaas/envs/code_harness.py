"""Runs inside the sandbox (standard library only, Python 3.8+): load the model's code, call its
function on each test's arguments, and write the returned values as JSON on stdout.

It never sees the expected values: the trusted parent compares (python_exec.score_results).
Anything the code writes to stdout goes to stderr instead (with tracebacks of its errors), so
the result line stays apart.
Input: /sandbox/calls.json = {"func": name, "args": [[arg, ...], ...]} and
/sandbox/solution.py. Output, one line: {"results": [{"value": v} | {"error": "Type"}, ...]},
or {"load_error": "Type"} when the code does not load or lacks the function.
"""

import json
import os
import sys
import traceback

MAX_DEPTH = 64
"""Nesting depth of a returned value beyond which it counts as not JSON."""
MAX_NAME_CHARS = 80


def main() -> None:
    """Run the calls and print the results document (the harness's only output)."""
    results_out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # the code's prints, even os.write(1, ...), land on stderr
    sys.stdout = sys.stderr
    with open("/sandbox/calls.json") as f:
        calls = json.load(f)
    dumps = json.dumps
    try:
        with open("/sandbox/solution.py") as f:
            source = f.read()
        namespace = {"__name__": "__solution__"}
        exec(compile(source, "solution.py", "exec"), namespace)
        func = namespace[calls["func"]]
    except BaseException as exc:  # the code may raise anything, SystemExit included
        traceback.print_exc()
        doc = {"load_error": _name(exc)}
    else:
        doc = {"results": [_call(func, args, dumps) for args in calls["args"]]}
    results_out.write(dumps(doc) + "\n")
    results_out.flush()


def _call(func, args, dumps) -> dict:
    try:
        value = func(*args)
        dumps(_plain(value, 0), allow_nan=False)  # raises when it is not plain JSON
    except BaseException as exc:
        traceback.print_exc()
        return {"error": _name(exc)}
    return {"value": value}


def _plain(value, depth):
    """`value` if it is made only of None, bool, int, float, str, list and str-keyed dict."""
    if depth > MAX_DEPTH:
        raise TypeError("nested too deep")
    kind = type(value)
    if value is None or kind in (bool, int, float, str):
        return value
    if kind is list:
        for item in value:
            _plain(item, depth + 1)
        return value
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str:
                raise TypeError("dict key is not a str")
            _plain(item, depth + 1)
        return value
    raise TypeError("not a JSON value")


def _name(exc: BaseException) -> str:
    return str(type(exc).__name__)[:MAX_NAME_CHARS]


if __name__ == "__main__":
    main()
