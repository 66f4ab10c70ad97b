"""What the binaries (`python -m train`, `python -m eval.evaluate`) share: how much they say and
how they end. Imports no TensorFlow, so a binary can call `quiet_tensorflow` before it does.

    python -m train ...                      # progress bar, one line per epoch, a result line
    python -m train --verbosity=info ...     # + the INFO logs of absl, TensorFlow and the trainer
    python -m train --verbosity=debug ...    # + DEBUG logs, all of TensorFlow's C++ logs, and the
                                             #   traceback of an error

--verbosity is absl's own flag (every absl binary has it, with -v: integers, -1 warning, 0 info,
1 debug), made to take the names quiet | info | debug too; in these binaries it defaults to
quiet (absl's own default is info). Levels:

* quiet: Python warnings and errors (not TensorFlow's Python warnings); TensorFlow's C++ logs off
  (``TF_CPP_MIN_LOG_LEVEL=3``: its start-up lines, oneDNN, CUDA probing).
* info: Python INFO logs (checkpoint saver, SavedModel writer, trainer); C++ warnings and errors.
* debug: Python DEBUG logs; every C++ log; tracebacks.

``TF_CPP_MIN_LOG_LEVEL`` is read by TensorFlow once, when it loads, so `quiet_tensorflow` sets it
from the command line before the binary imports TensorFlow; a value already in the environment
wins.

Exit statuses: 0 done; 1 an error (e.g. `EXIT_ERROR` for a non-finite loss); 2 bad input
(`EXIT_BAD_INPUT`: a flag, a flag combination, a missing or malformed data file, a folder that is
not an export): ONE line ``error: ...`` on stderr, with the traceback before it at
--verbosity=debug; 3 paused (`train.epochs.EXIT_PAUSED`); 4 a parameter server was lost
(`train.trainer.EXIT_PS_LOST`, one line naming it and the command that resumes); 130 interrupted
by Ctrl-C (`EXIT_INTERRUPTED`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import sys
import traceback
from typing import Optional, Sequence

from absl import app, flags
from absl import logging as absl_logging  # noqa: F401  (defines --verbosity)

__all__ = [
  "EXIT_BAD_INPUT",
  "EXIT_ERROR",
  "EXIT_INTERRUPTED",
  "VERBOSITIES",
  "bad_input",
  "command_line",
  "declare_verbosity_flag",
  "fail",
  "one_line",
  "parse_flags",
  "quiet_tensorflow",
  "run",
  "setup_logging",
  "started_as",
  "verbosity",
  "verbosity_from_argv",
]

# The flags declared key here belong to the binary that calls declare_verbosity_flag.
flags.disclaim_key_flags()

FLAGS = flags.FLAGS

EXIT_ERROR = 1
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130

VERBOSITIES = ("quiet", "info", "debug")
DEFAULT_VERBOSITY = "quiet"
_ABSL_LEVEL = {"quiet": -1, "info": 0, "debug": 1}  # absl's -1 warning, 0 info, 1 debug
_TF_CPP_LEVEL = {"quiet": "3", "info": "1", "debug": "0"}
_HELP = (
  "How much to say: quiet (progress and results only; the default), info (+ INFO logs "
  "of absl, TensorFlow and the trainer; TensorFlow's C++ warnings), debug (+ DEBUG logs, "
  "every C++ log, the traceback of an error). absl's integers work too (-1 quiet, 0 "
  "info, 1 debug). TensorFlow's C++ logs follow it unless TF_CPP_MIN_LOG_LEVEL is set."
)


def _name_of(level: int) -> str:
  return "quiet" if level < 0 else ("info" if level == 0 else "debug")


def _parse_level(argument) -> int:
  """An absl level from a name of VERBOSITIES or an integer; raises ValueError."""
  if isinstance(argument, int):
    return argument
  text = str(argument).strip().lower()
  if text in _ABSL_LEVEL:
    return _ABSL_LEVEL[text]
  try:
    return int(text)
  except ValueError:
    raise ValueError(
      f"expected one of {', '.join(VERBOSITIES)} or an integer, got {argument!r}"
    ) from None


class _VerbosityParser(flags.ArgumentParser):
  """absl's --verbosity parser (an integer), taking the names quiet | info | debug as well."""

  def parse(self, argument) -> int:
    return _parse_level(argument)

  def flag_type(self) -> str:
    return "quiet|info|debug"


def verbosity_from_argv(argv: Optional[Sequence[str]] = None) -> str:
  """The --verbosity (or -v) that ``argv`` (default sys.argv) asks for, before flags are parsed.

  The last one given wins; an unreadable value gives the default (the flag parser reports it).
  """
  argv = list(sys.argv if argv is None else argv)[1:]
  name = DEFAULT_VERBOSITY
  for k, arg in enumerate(argv):
    if arg == "--":
      break
    value = None
    for prefix in ("--verbosity", "-verbosity", "--v", "-v"):
      if arg == prefix and k + 1 < len(argv):
        value = argv[k + 1]
      elif arg.startswith(prefix + "="):
        value = arg[len(prefix) + 1 :]
    if value is not None:
      try:
        name = _name_of(_parse_level(value))
      except ValueError:
        pass
  return name


def quiet_tensorflow(argv: Optional[Sequence[str]] = None) -> None:
  """Sets TF_CPP_MIN_LOG_LEVEL for the --verbosity of ``argv`` unless the environment sets it.

  Call before TensorFlow is imported: it reads the variable once, when it loads.
  """
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", _TF_CPP_LEVEL[verbosity_from_argv(argv)])


def started_as(script: str) -> bool:
  """Whether this process is the console script ``script`` (e.g. tfrs-logq-evaluate)."""
  return bool(sys.argv) and os.path.splitext(os.path.basename(sys.argv[0]))[0] == script


def declare_verbosity_flag(flag_values: flags.FlagValues = FLAGS) -> None:
  """Makes absl's --verbosity take quiet | info | debug and lists it in the calling binary's
  --help (call it at module level of the binary)."""
  flag = flag_values["verbosity"]
  if not isinstance(flag.parser, _VerbosityParser):
    flag.parser = _VerbosityParser()
    flag.help = _HELP
  flags.declare_key_flag("verbosity", flag_values=flag_values)


def verbosity(flag_values: flags.FlagValues = FLAGS) -> str:
  """quiet | info | debug: the parsed --verbosity (quiet when not given)."""
  if not flag_values.is_parsed() or not flag_values["verbosity"].present:
    return DEFAULT_VERBOSITY
  return _name_of(flag_values.verbosity)


def setup_logging(flag_values: flags.FlagValues = FLAGS) -> str:
  """Sets the Python log levels for --verbosity (absl turns an unset one into INFO; here it is
  quiet); returns the verbosity's name."""
  name = verbosity(flag_values)
  if not flag_values["verbosity"].present:
    flag_values.verbosity = _ABSL_LEVEL[name]  # absl's setter sets the root logger's level
  # TensorFlow's Python warnings (e.g. SavedModel serialization notes) are noise at quiet.
  logging.getLogger("tensorflow").setLevel(logging.ERROR if name == "quiet" else logging.NOTSET)
  return name


def one_line(error: BaseException) -> str:
  """The message of ``error`` on one line (an OSError as 'path: reason')."""
  if isinstance(error, OSError) and error.filename and error.strerror:
    text = f"{error.filename}: {error.strerror}"
  elif isinstance(error, KeyError) and error.args:
    text = str(error.args[0])
  else:
    text = str(error) or type(error).__name__
  return " ".join(text.split())


def fail(
  message, status: int = EXIT_ERROR, error: Optional[BaseException] = None, hard: bool = False
):
  """Ends the process: ``error: message`` on stderr (the traceback of ``error`` first at
  --verbosity=debug) and exit status ``status``. ``hard``: `os._exit`, skipping the interpreter's
  teardown (after the loss of a remote task, TensorFlow's teardown of its remote context would
  log an error per function it cannot unregister, after this line)."""
  if error is not None and verbosity() == "debug":
    traceback.print_exception(error)
  sys.stdout.flush()
  print(f"error: {message}", file=sys.stderr, flush=True)
  if hard:
    os._exit(status)
  sys.exit(status)


@contextlib.contextmanager
def bad_input():
  """Errors raised inside are the user's input (flags, data files, exports): one line
  ``error: ...`` and exit status `EXIT_BAD_INPUT` (module docstring)."""
  try:
    yield
  except (ValueError, TypeError, OSError, app.UsageError) as e:
    fail(one_line(e), EXIT_BAD_INPUT, e)


def parse_flags(argv):
  """absl's flag parsing for app.run: an unknown flag or a bad value ends with one line
  ``error: ...`` and exit status 2 (instead of absl's status 1)."""
  try:
    return FLAGS(argv)
  except flags.Error as e:
    fail(f"{one_line(e)} (see --help)", EXIT_BAD_INPUT)


def command_line() -> str:
  """The command that started this process, as a shell would take it back."""
  return shlex.join(getattr(sys, "orig_argv", None) or [sys.executable, *sys.argv])


def run(main) -> None:
  """app.run(main) with `parse_flags`; `setup_logging` before main; app.UsageError from main ends
  with one line and status 2; an uncaught Ctrl-C with 'interrupted' and status 130."""

  def wrapped(argv):
    setup_logging()
    if len(argv) > 1:
      fail(f"unexpected arguments: {' '.join(argv[1:])} (flags are --name=value)", EXIT_BAD_INPUT)
    try:
      return main(argv)
    except app.UsageError as e:
      fail(one_line(e), EXIT_BAD_INPUT, e)
    except KeyboardInterrupt as e:
      if verbosity() == "debug":
        traceback.print_exception(e)
      sys.stdout.flush()
      print("\ninterrupted", file=sys.stderr, flush=True)
      sys.exit(EXIT_INTERRUPTED)

  app.run(wrapped, flags_parser=parse_flags)
