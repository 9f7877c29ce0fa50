"""User mistakes as one clear line: `UsageError` and the checks for misspelt keys and flags.

A mistake in a command's arguments, paths or data (a misspelt key, a negative learning rate, an empty folder) is a
`UsageError`: the scripts' entry point (`aasp_hf.utils.entry_points.run_script`) prints its message as one line,
`<script>: error: <message>`, and exits with code 2, like argparse's `parser.error`, without a traceback. A
traceback is kept for bugs. Any module may import this one. A misspelt flag gets the message a misspelt key gets,
with the closest flag: `check_flags`, `parse_command_line`.
"""

import sys

from ..configuration_aasp import unknown_keys_message


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


def check_flags(parser, argv) -> None:
    """A `UsageError` naming every flag of `argv` that `parser` (an argparse or HfArgumentParser) does not know, each
    with its closest valid flag: `--max_stpes 2` -> "unknown key in the command line: '--max_stpes' (did you mean
    '--max_steps'?)". Checked before parsing, so that a misspelt flag is named even when argparse would first
    complain about the required argument it failed to set. A prefix that argparse resolves (`--max_st`) is not
    unknown; tokens after `--` are values."""
    unknown = []
    for token in argv:
        if token == "--":
            break
        if not token.startswith("--"):
            continue
        flag = token.split("=", 1)[0]
        if flag in parser._option_string_actions or (parser.allow_abbrev and parser._get_option_tuples(flag)):
            continue
        unknown.append(flag)
    if unknown:
        valid = [option for option in parser._option_string_actions if option.startswith("--")]
        raise unknown_keys_error(unknown, valid, "the command line", "the script's --help")


def _usage_error(message: str):
    raise UsageError(message)


def one_line_errors(parser):
    """`parser` (argparse or HfArgumentParser) with argparse's own refusals (a missing required argument, an invalid
    choice or number) raised as a `UsageError`, which `entry_points.run_script` prints as one line instead of the usage
    block."""
    parser.error = _usage_error
    return parser


def parse_command_line(parser, argv=None):
    """`parser.parse_args(argv)` (default `sys.argv[1:]`) with every mistake as one `UsageError`: unknown flags with
    their closest valid flag (`check_flags`), then argparse's own refusals (`one_line_errors`). `--help` still
    prints the help and exits."""
    argv = list(sys.argv[1:] if argv is None else argv)
    check_flags(parser, argv)
    return one_line_errors(parser).parse_args(argv)
