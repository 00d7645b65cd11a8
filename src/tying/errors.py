"""Bad input apart from bugs: `UserError` is what the CLI prints as one line (exit status 2).

A user's mistake (a wrong option value, an unknown key, a missing or unreadable file, a token
id outside the vocabulary, an output folder that is not empty) raises a `UserError`; whatever
else escapes a verb is a bug and keeps its traceback (exit status 1). The project's own
errors subclass it:

    UserError
    ├── tying.config.ConfigError          (also a ValueError: a bad config value or key)
    ├── tying.interface.loss.TokenIdError (also a ValueError and an IndexError)
    ├── InvalidInputError                 (also a ValueError: a bad value given to a function)
    └── UserFileError                     (also an OSError: a user-given path)
        ├── MissingFileError              (also a FileNotFoundError)
        ├── ExistingFileError             (also a FileExistsError)
        ├── NotAFolderError               (also a NotADirectoryError)
        └── UnreadableFileError           (a file that is not what it should be: bad JSON,
                                           not UTF-8 text, a folder for a file)

The second bases keep `except ValueError` / `except FileNotFoundError` of callers working.
`read_text` and `read_json` read a user's file with one-line errors that name it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class UserError(Exception):
    """The input was wrong: the CLI prints `tying VERB: error: MESSAGE` and exits with 2."""


class InvalidInputError(UserError, ValueError):
    """A value the user gave (an option, an argument) that the function cannot take."""


class UserFileError(UserError, OSError):
    """A path the user gave that cannot be used."""


class MissingFileError(UserFileError, FileNotFoundError):
    """A user-given file or folder that does not exist."""


class ExistingFileError(UserFileError, FileExistsError):
    """A user-given output that already exists (and may not be replaced)."""


class NotAFolderError(UserFileError, NotADirectoryError):
    """A user-given path that should be a folder and is a file."""


class UnreadableFileError(UserFileError):
    """A user-given file that cannot be read as what it should be (JSON, UTF-8 text, ...)."""


def _first_line(error: BaseException) -> str:
    return (str(error).splitlines() or [type(error).__name__])[0]


def user_file_error(error: OSError | ValueError, path: str | Path, what: str = "file") -> UserError:
    """The `UserError` for `error` raised while reading the user's `path` (a `what`).

    FileNotFoundError -> `MissingFileError`, FileExistsError -> `ExistingFileError`, any other
    OSError (a folder, no permission) and a decode error (JSONDecodeError, UnicodeDecodeError)
    -> `UnreadableFileError`; the message names the file and the cause on one line.
    """
    if isinstance(error, FileNotFoundError):
        return MissingFileError(f"no such {what}: {path}")
    if isinstance(error, FileExistsError):
        return ExistingFileError(f"{what} {path} already exists")
    if isinstance(error, json.JSONDecodeError):
        return UnreadableFileError(f"{what} {path} is not valid JSON: {error}")
    if isinstance(error, UnicodeDecodeError):
        return UnreadableFileError(
            f"{what} {path} is not UTF-8 text (byte {error.start}: {error.reason})"
        )
    return UnreadableFileError(f"cannot read {what} {path}: {_first_line(error)}")


def read_text(path: str | Path, what: str = "file") -> str:
    """The UTF-8 text of a user's file; a one-line `UserFileError` naming it if that fails."""
    try:
        return Path(path).expanduser().read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise user_file_error(e, path, what) from e


def read_json(path: str | Path, what: str = "JSON file") -> Any:
    """The parsed JSON of a user's file; a one-line `UserFileError` naming it if that fails."""
    text = read_text(path, what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise user_file_error(e, path, what) from e
