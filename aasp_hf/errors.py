"""User mistakes as one clear line: `UsageError`, the check for misspelt keys, and the scripts' entry point.

A mistake in a command's arguments, paths or data (a misspelt key, a negative learning rate, an empty folder) is a
`UsageError`: the scripts print its message as one line, `<script>: error: <message>`, and exit with code 2, like
argparse's `parser.error`, without a traceback. A traceback is kept for bugs. Any module may import this one.
"""

import sys

from .configuration_aasp import unknown_keys_message


class UsageError(ValueError):
    """A mistake the user fixes by changing the command. A ValueError, so `except ValueError` still catches it."""


def unknown_keys_error(unknown, valid, what: str, where: str) -> UsageError:
    """The error for keys of `what` (e.g. "model_config") that are not among `valid`: each unknown key with its
    closest valid one, and where the valid keys are listed."""
    return UsageError(unknown_keys_message(unknown, valid, what, where))


def check_keys(given, valid, what: str, where: str) -> None:
    """Raises `unknown_keys_error` when `given` (a dict or its keys) holds a key outside `valid`."""
    unknown = set(given) - set(valid)
    if unknown:
        raise unknown_keys_error(unknown, valid, what, where)


def run_script(main, prog: str):
    """Runs `main()`; a `UsageError` becomes `prog: error: message` on stderr and exit code 2 (no traceback)."""
    try:
        return main()
    except UsageError as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
