"""Errors the CLI turns into a clear message on stderr and a non-zero exit (never a traceback)."""


class UserError(ValueError):
    """Bad input from the user: an unknown model, a malformed file, a value out of range.

    The message must name the bad value and, where there is a finite set, the allowed ones.
    """


class Unavailable(UserError):
    """Something an analysis needs is not present on this machine (e.g. the Chatbot Arena files)."""
